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

// A whole (not streamed) call that timed out after its request went out was billed
// its prompt all the same: the gateway's failure says so, estimated as a stalled
// stream's is (the provider reported nothing), so that the task's spend, its budgets
// and the quotas count it; it said 0 tokens and $0. A call refused with an HTTP
// error spent nothing of the kind.
func TestATimedOutCallCountsItsPrompt(t *testing.T) {
	ok := messages.ChatMessage{Role: messages.RoleAssistant, Content: "late"}
	slow := openaitest.Completion(ok, messages.Usage{PromptTokens: 100, CompletionTokens: 100})
	slow.Delay = time.Minute // held until the client gives up
	srv := openaitest.NewServer(t, openaitest.Sequence(slow, slow, openaitest.Error(503, "down")))
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
	req := llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "What is the meaning of all this, in a long essay?"}}}
	r, err := g.Generate(ctx, req)
	if !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err = %v, want the last attempt's 503", err)
	}
	want := messages.Usage{PromptTokens: 2 * llm.EstimateTokens(req.Messages)}
	want.CostUSD = float64(want.PromptTokens)
	if r.Usage != want {
		t.Fatalf("usage of two timed-out attempts and a 503: %+v, want %+v", r.Usage, want)
	}
}
