package react_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
)

// A request that fills the context window less the answer's reserve, answered
// with long replies that are not in the protocol: each retry sends back only the
// latest reply, clipped, so that the retry stays about as long as the request.
// Before, every reply went back whole and they accumulated: two replies of 24 KB
// put some 12,000 tokens more in the third attempt, past the window, which a
// provider refuses (context_length_exceeded) where the protocol's retry was
// meant to help.
func TestRetrySendsBackOnlyTheLatestReplyClipped(t *testing.T) {
	long := func(word string) string { return strings.Repeat(word+" rambles on without the format; ", 640) } // ~20 KB
	inner := &textModel{replies: []string{long("first"), long("second"), "Finish[42]"}}
	m := react.Wrap(inner, react.Options{MaxRetries: 2})
	req := llm.Request{Step: 1, Tools: tools, Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: "6*7?"}}}
	r, err := m.Generate(context.Background(), req)
	if err != nil || r.Message.Content != "42" {
		t.Fatalf("%+v %v", r, err)
	}
	size := func(msgs []messages.ChatMessage) int {
		n := 0
		for _, m := range msgs {
			n += len(m.Content)
		}
		return n
	}
	first := size(inner.seen[0])
	for i, msgs := range inner.seen[1:] {
		if grown := size(msgs) - first; grown > 1500 {
			t.Errorf("retry %d: %d bytes more than the request (%d messages)", i+1, grown, len(msgs))
		}
	}
	third := inner.seen[2]
	if len(third) != len(inner.seen[0])+2 || !strings.HasPrefix(third[len(third)-2].Content, "second rambles") ||
		!strings.Contains(third[len(third)-2].Content, "bytes of this reply left out") || !strings.Contains(third[len(third)-1].Content, "could not be parsed") {
		t.Errorf("the third attempt sends %d messages; the reply sent back: %.120q", len(third), third[len(third)-2].Content)
	}
}
