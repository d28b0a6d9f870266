package openai_test

import (
	"errors"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

func hello() llm.Request {
	return llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}
}

// Token counts a provider reports below zero are no counts: a negative prompt count
// would price the answer below nothing and take tokens off the task's spend.
func TestNegativeUsageIsNotKept(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{Content: "x"},
		messages.Usage{PromptTokens: -100, CompletionTokens: 5, CachedTokens: -3})))
	r, err := newModel(t, srv).Generate(deadline(t), hello())
	if err != nil {
		t.Fatal(err)
	}
	if want := (messages.Usage{CompletionTokens: 5}); r.Usage != want {
		t.Fatalf("usage %+v, want %+v", r.Usage, want)
	}
}

// A call that fails after the provider reported what it cost returns that usage
// with its error (llm.Model), so the task's spend, its budgets and the quotas count
// it: a stream cut after its usage chunk but before its finish_reason (a provider
// that reports usage as it goes), and an answer refused as
// malformed (a tool call with no name), streamed or whole.
func TestFailedCallsReturnTheirUsage(t *testing.T) {
	u := messages.Usage{PromptTokens: 120, CompletionTokens: 7}
	nameless := messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c1", Arguments: "{}"}}}
	for _, c := range []struct {
		name   string
		reply  openaitest.Reply
		stream bool
		want   error
	}{
		{"stream cut after its usage", openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("par"),
			openaitest.UsageChunk(u)), true, openai.ErrTruncatedStream},
		{"streamed answer refused", openaitest.Stream(openaitest.RoleChunk(), openaitest.ToolCallChunk(0, "c1", "", "{}"),
			openaitest.FinishChunk("tool_calls"), openaitest.UsageChunk(u), openaitest.Done), true, openai.ErrMalformedResponse},
		{"whole answer refused", openaitest.Completion(nameless, u), false, openai.ErrMalformedResponse},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return c.reply })
			m := newModel(t, srv)
			var (
				r   llm.Response
				err error
			)
			if c.stream {
				r, err = m.Stream(deadline(t), hello(), nil)
			} else {
				r, err = m.Generate(deadline(t), hello())
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if r.Usage != u || r.Message.Content != "" || len(r.Message.ToolCalls) != 0 {
				t.Fatalf("failure %+v, want only the usage %+v", r, u)
			}
		})
	}
}

// A stream cut before its usage chunk fails with an estimate of what it spent: the
// prompt, and the text it streamed; a provider that sent only the opening chunk
// streamed nothing to count.
func TestCutStreamsEstimateWhatTheySpent(t *testing.T) {
	prompt := llm.EstimateTokens(hello().Messages)
	for _, c := range []struct {
		name  string
		reply openaitest.Reply
		want  messages.Usage
	}{
		{"opened only", openaitest.Reply{Events: []string{openaitest.RoleChunk()}, Abort: true}, messages.Usage{PromptTokens: prompt}},
		{"text streamed", openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("twelve bytes")}, Abort: true},
			messages.Usage{PromptTokens: prompt, CompletionTokens: llm.EstimateTokens([]messages.ChatMessage{{Content: "twelve bytes"}})}},
		{"nothing came", openaitest.Error(503, "down"), messages.Usage{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			r, err := newModel(t, srv).Stream(deadline(t), hello(), nil)
			if !errors.Is(err, llm.ErrTransient) || r.Usage != c.want {
				t.Fatalf("usage %+v, err %v: want usage %+v", r.Usage, err, c.want)
			}
		})
	}
}
