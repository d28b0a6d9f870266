package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// spentFailing fails as a call that spent tokens does (llm.Model): a ReAct reply
// that could not be parsed, a transient failure after the provider counted a prompt.
func spentFailing(err error) (llm.Response, error) {
	return llm.Response{Usage: messages.Usage{PromptTokens: 100, CompletionTokens: 20}}, err
}

// The tokens a failed call spent reach the gateway's answer or failure, priced,
// whichever layer the call failed under: Retry's attempts, Fallback's models; and
// Quotas charges them.
func TestTheGatewayKeepsTheUsageOfFailedCalls(t *testing.T) {
	transient := fmt.Errorf("cut mid-answer: %w", llm.ErrTransient)
	primary := &fakeModel{name: "primary", fn: func(n int, _ llm.Request) (llm.Response, error) {
		if n == 1 {
			return spentFailing(transient) // retried
		}
		return spentFailing(errors.New("unparseable")) // falls over
	}}
	backup := &fakeModel{name: "backup", fn: func(int, llm.Request) (llm.Response, error) { return answer("from backup"), nil }}
	g, _, _ := newGateway(t, gateway.Config{
		Chain: []llm.Model{primary, backup}, Retry: gateway.RetryPolicy{MaxAttempts: 3},
		Prices: map[string]gateway.Price{"primary": {Prompt: 1e6, Completion: 1e6}, "backup": {Prompt: 1e6, Completion: 1e6}}, // $1 a token
		Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 400, Window: time.Hour}},
	})
	r, err := g.Generate(context.Background(), ask("q"))
	if err != nil || r.Message.Content != "from backup" {
		t.Fatalf("%+v %v", r, err)
	}
	// Two attempts of the primary (120 tokens each), the backup's answer (15).
	if want := (messages.Usage{PromptTokens: 210, CompletionTokens: 45, CostUSD: 255}); r.Usage != want {
		t.Fatalf("usage %+v, want %+v", r.Usage, want)
	}
	// All failing: the failure carries what every attempt spent.
	backup.fn = func(int, llm.Request) (llm.Response, error) { return spentFailing(errors.New("bad answer")) }
	r, err = g.Generate(context.Background(), ask("q2"))
	if !errors.Is(err, gateway.ErrAllFailed) {
		t.Fatalf("all failed: %v", err)
	}
	if want := (messages.Usage{PromptTokens: 200, CompletionTokens: 40, CostUSD: 240}); r.Usage != want || r.Message.Content != "" {
		t.Fatalf("failure %+v, want only the usage %+v", r, want)
	}
	// 255 + 240 tokens charged: the quota of 400 is spent.
	if _, err := g.Generate(context.Background(), ask("q3")); !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "495 of 400") {
		t.Fatalf("the quota must count the failed calls' tokens: %v", err)
	}
}
