package openai

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A chat answer past maxAnswerBytes, whole or streamed, fails at once (malformed,
// not transient: no retry reads it again) instead of being read into memory to its
// end; an answer within it is read.
func TestAnswerLargerThanTheBoundFails(t *testing.T) {
	defer func(old int64) { maxAnswerBytes = old }(maxAnswerBytes)
	maxAnswerBytes = 4 << 10
	big := strings.Repeat("A", 8<<10)
	u := messages.Usage{PromptTokens: 1, CompletionTokens: 1}
	pieces := make([]string, 64)
	for i := range pieces {
		pieces[i] = strings.Repeat("B", 128)
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Completion(messages.ChatMessage{Content: big}, u),
		openaitest.TextStream(u, pieces...),
		openaitest.Completion(messages.ChatMessage{Content: big}, u), // a whole answer to a streamed request
		openaitest.Completion(messages.ChatMessage{Content: "small"}, u),
	))
	m, err := New(Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "larger than 4 KiB") {
			t.Fatalf("%s: %v; want a malformed answer, larger than the bound", what, err)
		}
	}
	_, err = m.Generate(ctx, req)
	check("whole", err)
	_, err = m.Stream(ctx, req, func(Delta) error { return nil })
	check("streamed", err)
	_, err = m.Stream(ctx, req, func(Delta) error { return nil })
	check("whole to a streamed request", err)
	if r, err := m.Generate(ctx, req); err != nil || r.Message.Content != "small" {
		t.Fatalf("small: %+v %v", r, err)
	}
}
