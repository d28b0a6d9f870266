package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

func TestExactCacheAnswersTheSameRequestWithoutACall(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
		r := answer("answer")
		r.Model, r.Usage.CostUSD = "backup", 0.5
		return r, nil
	}}
	cached := gateway.ExactCache(gateway.CacheConfig{TTL: time.Minute}, c.Now)(m)
	ctx := context.Background()
	first, _ := cached.Generate(ctx, ask("q"))
	second, _ := cached.Generate(ctx, ask("q"))
	if first.Cached || !second.Cached || m.calls.Load() != 1 {
		t.Fatalf("first %+v second %+v calls %d", first, second, m.calls.Load())
	}
	if second.Message.Content != "answer" || second.Model != "backup" || second.Usage != first.Usage {
		t.Fatalf("a cached answer repeats the answer, its model and its usage: %+v", second)
	}
	if r, _ := cached.Generate(ctx, ask("another question")); r.Cached {
		t.Fatal("another request must miss")
	}
	bypass := ask("q")
	bypass.NoCache = true
	if r, _ := cached.Generate(ctx, bypass); r.Cached || m.calls.Load() != 3 {
		t.Fatal("NoCache must reach the model")
	}
	otherNS := ask("q")
	otherNS.Scope.Agent = "b"
	if r, _ := cached.Generate(ctx, otherNS); r.Cached {
		t.Fatal("namespaces must not share entries")
	}
	c.add(time.Minute)
	if r, _ := cached.Generate(ctx, ask("q")); r.Cached {
		t.Fatal("an expired entry must not answer")
	}
}

func TestExactCacheKeysByTheWrappedModelAndEvictsTheOldest(t *testing.T) {
	mw := gateway.ExactCache(gateway.CacheConfig{TTL: time.Hour, MaxEntries: 2}, nil)
	a, b := answering("a", "from a"), answering("b", "from b")
	ca, cb := mw(a), mw(b)
	ctx := context.Background()
	ca.Generate(ctx, ask("q"))
	if r, _ := cb.Generate(ctx, ask("q")); r.Cached || r.Message.Content != "from b" {
		t.Fatalf("another model's answer must not be served: %+v", r)
	}
	// Entries: a/q, b/q. A third evicts a/q, the oldest.
	ca.Generate(ctx, ask("q2"))
	if r, _ := cb.Generate(ctx, ask("q")); !r.Cached {
		t.Fatal("b/q must still be cached")
	}
	if r, _ := ca.Generate(ctx, ask("q")); r.Cached {
		t.Fatal("a/q must have been evicted")
	}
}

// An answer that a cache below served is not stored again (it would outlive its TTL).
func TestExactCacheDoesNotStoreACachedAnswer(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		r := answer("from a cache below")
		r.Cached = true
		return r, nil
	}}
	cached := gateway.ExactCache(gateway.CacheConfig{TTL: time.Hour}, nil)(m)
	cached.Generate(context.Background(), ask("q"))
	cached.Generate(context.Background(), ask("q"))
	if m.calls.Load() != 2 {
		t.Fatalf("calls %d", m.calls.Load())
	}
}
