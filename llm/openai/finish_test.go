package openai_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// An answer the provider did not finish says why: its finish reason, as
// llm.AbnormalFinish keeps it; a whole one (stop, tool_calls) says nothing.
func TestFinishReasonOfAnUnfinishedAnswer(t *testing.T) {
	u := messages.Usage{PromptTokens: 10, CompletionTokens: 16}
	whole := func(finish string) openaitest.Reply {
		body := openaitest.CompletionJSON(messages.ChatMessage{Content: "The answer is"}, u)
		return openaitest.Reply{Body: strings.Replace(body, `"finish_reason":"stop"`, `"finish_reason":"`+finish+`"`, 1)}
	}
	streamed := func(finish string) openaitest.Reply {
		return openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("The answer is"),
			openaitest.FinishChunk(finish), openaitest.UsageChunk(u), openaitest.Done)
	}
	for _, c := range []struct{ finish, want string }{
		{"length", llm.FinishLength},
		{"content_filter", llm.FinishContentFilter},
		{"max_tokens", llm.FinishLength},
		{"stop", ""},
		{"recitation", "recitation"},
	} {
		srv := openaitest.NewServer(t, openaitest.Sequence(whole(c.finish), streamed(c.finish)))
		m := newModel(t, srv)
		r, err := m.Generate(deadline(t), llm.Request{Messages: conversation()})
		if err != nil || r.FinishReason != c.want || r.Message.Content != "The answer is" {
			t.Errorf("finish_reason %q: Generate gave %+v, %v; want finish reason %q", c.finish, r, err, c.want)
		}
		_, r, err = stream(t, m)
		if err != nil || r.FinishReason != c.want || r.Message.Content != "The answer is" {
			t.Errorf("finish_reason %q: Stream gave %+v, %v; want finish reason %q", c.finish, r, err, c.want)
		}
	}
}

func TestAbnormalFinishIsBounded(t *testing.T) {
	long := strings.Repeat("é", 100)
	got := llm.AbnormalFinish(long)
	if len(got) > 64 || !strings.HasPrefix(long, got) || !strings.HasSuffix(got, "é") {
		t.Fatalf("AbnormalFinish kept %q (%d bytes)", got, len(got))
	}
}
