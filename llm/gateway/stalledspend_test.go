package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A streamed answer the provider began and then stalled on (or cut) before its
// usage chunk was billed all the same: the prompt, and the tokens it streamed. The
// gateway's failure says what every such attempt spent, estimated (the provider
// reported nothing), so that the task's spend, its budgets and the quotas count it;
// it said 0 tokens and $0 for any number of stalled attempts. A call that failed
// before the provider answered anything (an HTTP error) spent nothing of the kind.
func TestAStalledStreamCountsWhatItSpent(t *testing.T) {
	stall := openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("Thinking about it, the answer")}, Stall: true}
	srv := openaitest.NewServer(t, openaitest.Sequence(stall, stall, openaitest.Error(503, "down")))
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "p", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3},
		Prices: map[string]gateway.Price{"p": {Prompt: 1e6, Completion: 1e6}}, // $1 a token
		Sleep:  func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ctx = llm.WithDeltas(ctx, func(int, llm.Delta) {})
	req := llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "What is the meaning of all this, in a long essay?"}}}
	r, err := g.Generate(ctx, req)
	if !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err = %v, want the last attempt's 503", err)
	}
	one := messages.Usage{PromptTokens: llm.EstimateTokens(req.Messages),
		CompletionTokens: llm.EstimateTokens([]messages.ChatMessage{{Role: messages.RoleAssistant, Content: "Thinking about it, the answer"}})}
	want := one.Add(one)
	want.CostUSD = float64(want.PromptTokens + want.CompletionTokens)
	if r.Usage != want {
		t.Fatalf("usage of two stalled attempts and a 503: %+v, want %+v", r.Usage, want)
	}
}

// A whole (JSON) answer cut part-way, after the provider wrote its usage, was
// billed as it said: the gateway's failure, after its retries, counts what each
// cut attempt reported, priced, as it counts a streamed answer cut so. It counted
// nothing.
func TestACutWholeAnswerCountsWhatItReported(t *testing.T) {
	cut := openaitest.Reply{Body: `{"id":"c1","object":"chat.completion","model":"p","usage":{"prompt_tokens":100,"completion_tokens":20},` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"The answer`, Abort: true}
	srv := openaitest.NewServer(t, openaitest.Sequence(cut, cut, openaitest.Error(503, "down")))
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "p", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3},
		Prices: map[string]gateway.Price{"p": {Prompt: 1e6, Completion: 1e6}}, // $1 a token
		Sleep:  func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := g.Generate(ctx, llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "Say something."}}})
	if !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err = %v, want the last attempt's 503", err)
	}
	want := messages.Usage{PromptTokens: 200, CompletionTokens: 40, CostUSD: 240}
	if r.Usage != want {
		t.Fatalf("usage of two cut answers and a 503: %+v, want %+v", r.Usage, want)
	}
}
