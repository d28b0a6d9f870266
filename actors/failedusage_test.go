package actors_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// garbleModel speaks no protocol: every reply is unparseable, and costs 10+2 tokens.
type garbleModel struct{}

func (garbleModel) Name() string { return "garble" }
func (garbleModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "no"},
		Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 2}}, nil
}

// A model call that failed after it spent tokens (a ReAct model's unparseable
// replies, through the gateway as a node wires it) is recorded with what it spent:
// the task's usage, which its budgets count, is not short of it.
func TestAFailedModelCallIsRecordedWithTheTokensItSpent(t *testing.T) {
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{react.Wrap(garbleModel{}, react.Options{MaxRetries: 2})}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{model: g, tools: []tools.Tool{funcTool{name: "send"}}})
	h.submit("s-failed-usage", "t1", "send it")
	events := h.wait("s-failed-usage")
	want := messages.Usage{PromptTokens: 30, CompletionTokens: 6} // 3 attempts
	var responded *messages.ModelResponded
	for _, e := range events {
		if e.Type == messages.TypeModelResponded {
			responded = decode[*messages.ModelResponded](t, e)
		}
	}
	if responded == nil || responded.Error == "" || responded.Usage != want {
		t.Fatalf("model.responded %+v, want a failure with usage %+v", responded, want)
	}
	if f := decode[*messages.TaskFailed](t, events[len(events)-1]); f.Usage != want {
		t.Fatalf("task.failed usage %+v, want %+v", f.Usage, want)
	}
}
