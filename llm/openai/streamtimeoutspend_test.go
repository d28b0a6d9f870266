package openai_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// A stream that timed out after its request went out, before its first chunk (a
// model slow to its first token: held before the status line, or after it with
// no event yet), was billed its prompt, as a whole call that timed out is
// (Generate's timedOutSpend): its failure says so, estimated. It said nothing
// spent. Both the client's timeout and the caller's deadline count.
func TestStreamTimedOutBeforeItsFirstChunkCountsItsPrompt(t *testing.T) {
	for _, c := range []struct {
		name     string
		reply    openaitest.Reply
		deadline bool // the caller's deadline ends it, not Config.Timeout
	}{
		{"held before the status line", openaitest.Reply{Delay: time.Minute}, false},
		{"no event after the status line", openaitest.Reply{Events: []string{}, Stall: true}, false},
		{"the caller's deadline", openaitest.Reply{Events: []string{}, Stall: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			timeout, deadline := 200*time.Millisecond, 30*time.Second
			if c.deadline {
				timeout, deadline = time.Hour, 200*time.Millisecond
			}
			m := newModel(t, srv, func(cfg *openai.Config) { cfg.Timeout = timeout })
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			req := llm.Request{Messages: conversation()[:2]}
			r, err := m.Stream(ctx, req, nil)
			if err == nil {
				t.Fatalf("answer %+v, want the timeout", r)
			}
			if want := llm.EstimateTokens(req.Messages); r.Usage.PromptTokens != want || r.Usage.CompletionTokens != 0 {
				t.Fatalf("usage %+v (%v), want an estimate of the prompt, %d tokens", r.Usage, err, want)
			}
			if !errors.Is(err, llm.ErrTransient) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
