package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// generateWithin runs g.Generate and fails the test if it has not returned within a
// deadline far longer than any test needs (the backoffs these tests configure are
// hours long: a layer that does not stop on cancellation would wait them out).
func generateWithin(t *testing.T, m llm.Model, ctx context.Context, req llm.Request) (llm.Response, error) {
	t.Helper()
	type result struct {
		r   llm.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := m.Generate(ctx, req)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("Generate did not return after its context was cancelled")
		return llm.Response{}, nil
	}
}

// A call cancelled while a model is answering stops every layer: no retry, no sleep,
// no fallback, and the error says it was cancelled even though the model's own error
// did not.
func TestCancellationDuringACallStopsEveryLayer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	primary := &fakeModel{name: "primary", fn: func(int, llm.Request) (llm.Response, error) {
		cancel()
		return llm.Response{}, &llm.APIError{StatusCode: 503}
	}}
	backup := &fakeModel{name: "backup", fn: func(int, llm.Request) (llm.Response, error) { return answer("late"), nil }}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{primary, backup},
		Retry: gateway.RetryPolicy{MaxAttempts: 100, Initial: time.Hour, Max: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = generateWithin(t, g, ctx, ask("q"))
	if !errors.Is(err, context.Canceled) || primary.calls.Load() != 1 || backup.calls.Load() != 0 {
		t.Fatalf("err %v, primary calls %d, backup calls %d", err, primary.calls.Load(), backup.calls.Load())
	}
	var api *llm.APIError
	if !errors.As(err, &api) {
		t.Fatalf("the model's error must still be in the chain: %v", err)
	}
}

// A Sleep that ignores its context (as a test's may) does not make the retry layer
// call the model again once the context is cancelled; nor does a call made with a
// cancelled context ever reach the model.
func TestCancelledContextNeverReachesTheModel(t *testing.T) {
	for i := 0; i < 20; i++ {
		m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
		ctx, cancel := context.WithCancel(context.Background())
		g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3},
			Sleep: func(context.Context, time.Duration) error { cancel(); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := generateWithin(t, g, ctx, ask("q")); !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
			t.Fatalf("run %d: err %v, calls %d: want context.Canceled after 1 call", i, err, m.calls.Load())
		}
		if _, err := generateWithin(t, g, ctx, ask("q")); !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
			t.Fatalf("run %d: a cancelled context reached the model: err %v, calls %d", i, err, m.calls.Load())
		}
	}
}

// The caches are outside the quotas: a cached answer makes no call and is served even
// when the quota is spent; a new question is refused before any model is called,
// neither retried nor tried on the backup.
func TestCacheHitCostsNoCallAndNoQuota(t *testing.T) {
	primary, backup := answering("primary", "ok"), answering("backup", "unused")
	g, s, _ := newGateway(t, gateway.Config{Chain: []llm.Model{primary, backup},
		Cache:  &gateway.CacheConfig{TTL: time.Hour},
		Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 15, Window: time.Hour}}})
	ctx := context.Background()
	if r, err := g.Generate(ctx, ask("q")); err != nil || r.Cached {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := g.Generate(ctx, ask("q")); err != nil || !r.Cached {
		t.Fatalf("a cached answer must be served with the quota spent: %+v %v", r, err)
	}
	if _, err := g.Generate(ctx, ask("new")); !errors.Is(err, gateway.ErrQuotaExceeded) {
		t.Fatalf("err %v", err)
	}
	if primary.calls.Load() != 1 || backup.calls.Load() != 0 || len(s.waits) != 0 {
		t.Fatalf("calls %d %d, waits %v", primary.calls.Load(), backup.calls.Load(), s.waits)
	}
}

// Pricing wraps each model of the chain: an answer is priced as the model that gave
// it, and a cached answer repeats its model and cost.
func TestCostAndModelAreThoseOfTheModelThatAnswered(t *testing.T) {
	primary := failWith("primary", &llm.APIError{StatusCode: 401})
	backup := answering("backup", "ok") // 10 prompt + 5 completion tokens
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{primary, backup},
		Cache:  &gateway.CacheConfig{TTL: time.Hour},
		Prices: map[string]gateway.Price{"primary": {Prompt: 100, Completion: 100}, "backup": {Prompt: 2, Completion: 4}}})
	want := (10*2.0 + 5*4.0) / 1e6
	for i, cached := range []bool{false, true} {
		r, err := g.Generate(context.Background(), ask("q"))
		if err != nil || r.Cached != cached || r.Model != "backup" || r.Usage.CostUSD < want-1e-12 || r.Usage.CostUSD > want+1e-12 {
			t.Fatalf("call %d: %+v %v: want model backup, cost %v, cached %v", i, r, err, want, cached)
		}
	}
	if primary.calls.Load() != 1 || backup.calls.Load() != 1 {
		t.Fatalf("calls %d %d", primary.calls.Load(), backup.calls.Load())
	}
}

// The quotas charge the tokens counted for a provider that reported none.
func TestQuotaChargesTheCountedTokens(t *testing.T) {
	silent := &fakeModel{name: "silent", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "an answer"}}, nil
	}}
	// ask("q"): (4 + 1) + (4 + 1) prompt tokens, (4 + 2) completion: 16 a call.
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{silent}, Tokenizer: words{},
		Quotas: []gateway.Quota{{Scope: "agent:a", Tokens: 17, Window: time.Hour}}})
	for i := 0; i < 2; i++ {
		if r, err := g.Generate(context.Background(), ask("q")); err != nil || r.Usage.PromptTokens+r.Usage.CompletionTokens != 16 {
			t.Fatalf("call %d: %+v %v", i, r.Usage, err)
		}
	}
	if _, err := g.Generate(context.Background(), ask("q")); !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "32 of 17 tokens") {
		t.Fatalf("err %v", err)
	}
}

// Retry is outside the concurrency limit: a call waiting to retry does not hold its
// provider's slot, so another call can use it meanwhile.
func TestRetryWaitHoldsNoProviderSlot(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
		if n == 1 {
			return llm.Response{}, &llm.APIError{StatusCode: 503}
		}
		return answer("ok"), nil
	}}
	var g *gateway.Gateway
	var during error
	cfg := gateway.Config{Chain: []llm.Model{m}, Concurrency: map[string]int{"m": 1},
		Sleep: func(ctx context.Context, _ time.Duration) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, during = g.Generate(ctx, ask("meanwhile"))
			return nil
		}}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(context.Background(), ask("q")); err != nil || during != nil || m.calls.Load() != 3 {
		t.Fatalf("err %v, call during the wait %v, calls %d", err, during, m.calls.Load())
	}
}
