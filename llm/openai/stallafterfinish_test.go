package openai_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A stream that finished every choice and then stalls before [DONE] (a server or
// proxy that keeps the connection open) has answered: the answer is returned once
// its usage came, or, when none comes, a short grace after its finish_reason; not
// when Config.Timeout ends, which here is past the caller's deadline.
func TestStreamStalledAfterFinishAnswersBeforeTheTimeout(t *testing.T) {
	u := messages.Usage{PromptTokens: 9, CompletionTokens: 2}
	finish := []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), openaitest.FinishChunk("stop")}
	for _, c := range []struct {
		name   string
		events []string
		want   messages.Usage
	}{
		{"after its usage", append(finish, openaitest.UsageChunk(u)), u},
		{"after its finish_reason", finish, messages.Usage{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Events: c.events, Stall: true}))
			m := newModel(t, srv, func(c *openai.Config) { c.Timeout = time.Hour })
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			r, err := m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if err != nil || r.Message.Content != "Hi" || r.Usage != c.want {
				t.Fatalf("%+v %v: want the answer %q with usage %+v", r, err, "Hi", c.want)
			}
		})
	}
}
