package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// tagging is a middleware that appends its tag to the request's last message on the
// way in and to the answer's message on the way out.
func tagging(tag string) gateway.Middleware {
	return func(next llm.Model) llm.Model { return &tagged{Model: next, tag: tag} }
}

type tagged struct {
	llm.Model
	tag string
}

func (m *tagged) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	msgs := append([]messages.ChatMessage(nil), req.Messages...)
	msgs[len(msgs)-1].Content += " in:" + m.tag
	req.Messages = msgs
	resp, err := m.Model.Generate(ctx, req)
	resp.Message.Content += " out:" + m.tag
	return resp, err
}

func TestChainAppliesTheFirstMiddlewareOutermost(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(_ int, req llm.Request) (llm.Response, error) {
		return answer(req.Messages[len(req.Messages)-1].Content), nil
	}}
	chained := gateway.Chain(m, tagging("a"), tagging("b"))
	r, err := chained.Generate(context.Background(), ask("q"))
	if err != nil || r.Message.Content != "q in:a in:b out:b out:a" {
		t.Fatalf("%q %v", r.Message.Content, err)
	}
	if chained.Name() != "m" {
		t.Fatalf("a chain has the name of the model it wraps, not %q", chained.Name())
	}
	if gateway.Chain(m) != llm.Model(m) {
		t.Fatal("a chain of no middleware is the model itself")
	}
}

func ExampleChain() {
	model, _ := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{Content: "144", Usage: messages.Usage{PromptTokens: 1000, CompletionTokens: 10}}}})
	m := gateway.Chain(model,
		gateway.Pricing(map[string]gateway.Price{"scripted": {Prompt: 2, Completion: 10}}),
		gateway.Retry(gateway.RetryPolicy{MaxAttempts: 3}, nil, nil),
	)
	r, _ := m.Generate(context.Background(), llm.Request{Step: 1, Messages: []messages.ChatMessage{
		{Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}}})
	fmt.Println(r.Message.Content, strings.TrimRight(fmt.Sprintf("%.4f", r.Usage.CostUSD), "0"))
	// Output: 144 0.0021
}
