package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// TestRoutesSendARequestToTheChainItNames: a request naming a chain (an agent's own
// model and fallbacks) goes to that chain, through the same retries, quotas and
// cache as the gateway's own; a chain the gateway does not have is refused.
func TestRoutesSendARequestToTheChainItNames(t *testing.T) {
	def := answering("default", "from default")
	own := answering("own", "from own")
	down := &fakeModel{name: "down", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 503}
	}}
	backup := answering("backup", "from backup")
	g, sleeps, _ := newGateway(t, gateway.Config{
		Chain: []llm.Model{def},
		// "default" in a route is the gateway's model, wrapped once.
		Routes: [][]llm.Model{{own}, {down, backup}, {answering("default", "another default"), own}},
		Retry:  gateway.RetryPolicy{MaxAttempts: 2},
		Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 40, Window: time.Hour}},
		Cache:  &gateway.CacheConfig{TTL: time.Hour},
		Prices: map[string]gateway.Price{"own": {Prompt: 1e6}},
	})
	ctx := context.Background()

	r, err := g.Generate(ctx, ask("plain"))
	if err != nil || r.Message.Content != "from default" || r.Model != "" {
		t.Fatalf("no chain named: %+v %v, want the gateway's own chain", r, err)
	}
	req := ask("mine")
	req.Models = []string{"own"}
	r, err = g.Generate(ctx, req)
	if err != nil || r.Message.Content != "from own" || r.Model != "own" || r.Usage.CostUSD != 10 {
		t.Fatalf("route own: %+v %v, want own's answer, named and priced as own", r, err)
	}
	req = ask("falls over")
	req.Scope.Agent = "b"
	req.Models = []string{"down", "backup"}
	r, err = g.Generate(ctx, req)
	if err != nil || r.Message.Content != "from backup" || r.Model != "backup" {
		t.Fatalf("route down, backup: %+v %v, want backup's answer", r, err)
	}
	if down.calls.Load() != 2 || len(sleeps.waits) != 1 {
		t.Fatalf("down called %d times with %d waits: want its retries spent before the fallback", down.calls.Load(), len(sleeps.waits))
	}
	req = ask("default first")
	req.Scope.Agent = "c"
	req.Models = []string{"default", "own"}
	r, err = g.Generate(ctx, req)
	if err != nil || r.Message.Content != "from default" || r.Model != "" {
		t.Fatalf("route default, own: %+v %v, want the first model given of that name", r, err)
	}

	// The cache is shared: the same request again is answered without a call.
	req = ask("mine")
	req.Models = []string{"own"}
	if r, err = g.Generate(ctx, req); err != nil || !r.Cached || own.calls.Load() != 1 {
		t.Fatalf("cached: %+v %v, own called %d times", r, err, own.calls.Load())
	}
	// The quota is shared: agent a spent 30 of its 40 tokens on two chains.
	req = ask("more")
	req.Models = []string{"own"}
	if _, err := g.Generate(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(ctx, ask("over")); !errors.Is(err, gateway.ErrQuotaExceeded) {
		t.Fatalf("agent a over its quota across chains: %v", err)
	}

	req = ask("nowhere")
	req.Scope.Agent = "d"
	req.Models = []string{"own", "backup"}
	_, err = g.Generate(ctx, req)
	if !errors.Is(err, gateway.ErrUnknownRoute) || errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "own, backup") {
		t.Fatalf("unknown chain: %v", err)
	}
	if _, err := gateway.New(gateway.Config{Chain: []llm.Model{def}, Routes: [][]llm.Model{{}}}); err == nil {
		t.Fatal("an empty route must be refused")
	}
}
