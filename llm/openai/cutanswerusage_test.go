package openai_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A whole (non-streamed) JSON answer whose body is cut or stalls part-way was
// billed by the provider all the same: the failure returns the usage the
// provider reported in the part that came, or, when that part holds none, an
// estimate of the prompt, as a streamed answer that failed so does. Before,
// Generate returned no usage for a cut body, nor for one whose usage came before
// the cut, and Stream none for a JSON answer that stalled: the task's budgets and
// the gateway's quotas counted nothing for any number of such attempts.
func TestACutWholeAnswerReturnsWhatItSpent(t *testing.T) {
	const withUsage = `{"id":"c1","object":"chat.completion","model":"p","usage":{"prompt_tokens":1234,"completion_tokens":56,"total_tokens":1290},` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"The answer is`
	const withoutUsage = `{"id":"c1","object":"chat.completion","model":"p","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is`
	// A usage written inside the answer's text is no usage of the provider's.
	const quotedUsage = `{"id":"c1","object":"chat.completion","model":"p","choices":[{"index":0,"message":{"role":"assistant","content":"it says \"usage\": {\"prompt_tokens\": 9} and`
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "What is the meaning of all this, in a long essay?"}}}
	reported := messages.Usage{PromptTokens: 1234, CompletionTokens: 56}
	estimated := messages.Usage{PromptTokens: llm.EstimateTokens(req.Messages)}
	for _, c := range []struct {
		name   string
		reply  openaitest.Reply
		stream bool
		want   messages.Usage
	}{
		{"generate, cut after the usage", openaitest.Reply{Body: withUsage, Abort: true}, false, reported},
		{"generate, cut before any usage", openaitest.Reply{Body: withoutUsage, Abort: true}, false, estimated},
		{"generate, cut after a usage in the text", openaitest.Reply{Body: quotedUsage, Abort: true}, false, estimated},
		{"generate, stalled after the usage", openaitest.Reply{Body: withUsage, Stall: true}, false, reported},
		{"stream, JSON cut after the usage", openaitest.Reply{Body: withUsage, Abort: true}, true, reported},
		{"stream, JSON stalled after the usage", openaitest.Reply{Body: withUsage, Stall: true}, true, reported},
		{"stream, JSON stalled before any usage", openaitest.Reply{Body: withoutUsage, Stall: true}, true, estimated},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "p", Timeout: time.Second, StreamIdleTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var r llm.Response
			if c.stream {
				r, err = m.Stream(ctx, req, func(openai.Delta) error { return nil })
			} else {
				r, err = m.Generate(ctx, req)
			}
			if !errors.Is(err, llm.ErrTransient) {
				t.Fatalf("err = %v, want a transient failure", err)
			}
			if r.Usage != c.want {
				t.Errorf("usage = %+v, want %+v", r.Usage, c.want)
			}
		})
	}
}
