package gateway_test

import (
	"context"
	"errors"
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

// firstAnswers are the first answers to a request that no cache may keep, since the
// same request asked again (the task retried) must reach the provider again: an
// answer the provider ended before it was finished (llm.AbnormalFinish keeps its
// reason), an empty one, and a failure.
func firstAnswers() []struct {
	name string
	resp llm.Response
	err  error
} {
	unfinished := func(content, reason string) llm.Response {
		r := answer(content)
		r.FinishReason = llm.AbnormalFinish(reason)
		return r
	}
	return []struct {
		name string
		resp llm.Response
		err  error
	}{
		{"cut at the output limit", unfinished("the first half of", "length"), nil},
		{"cut at max_tokens", unfinished("the first half of", "max_tokens"), nil},
		{"content filter", unfinished("", "content_filter"), nil},
		{"safety", unfinished("", "SAFETY"), nil},
		{"recitation", unfinished("partly recited", "recitation"), nil},
		{"refusal", unfinished("I can't", "refusal"), nil},
		{"empty", answer(""), nil},
		{"failed", llm.Response{}, &llm.APIError{StatusCode: 503}},
	}
}

// cacheKeepsOnlyWholeAnswers asks a cache the same question three times, of a model
// whose first answer is one of firstAnswers and whose later ones are whole: the
// second call must reach the model and get the whole answer, the third the cached one.
func cacheKeepsOnlyWholeAnswers(t *testing.T, cache func() gateway.Middleware) {
	for _, c := range firstAnswers() {
		t.Run(c.name, func(t *testing.T) {
			m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
				if n == 1 {
					return c.resp, c.err
				}
				return answer("the whole answer"), nil
			}}
			cached := cache()(m)
			ctx := context.Background()
			q := "What is the capital of France?"
			if r, err := cached.Generate(ctx, ask(q)); r.Cached || r.FinishReason != c.resp.FinishReason || !errors.Is(err, c.err) {
				t.Fatalf("first call: %+v, %v", r, err)
			}
			r, err := cached.Generate(ctx, ask(q))
			if err != nil || r.Cached || r.FinishReason != "" || r.Message.Content != "the whole answer" || m.calls.Load() != 2 {
				t.Fatalf("the same request again must reach the model and get its whole answer: %+v, %v, calls %d", r, err, m.calls.Load())
			}
			r, err = cached.Generate(ctx, ask(q))
			if err != nil || !r.Cached || r.Message.Content != "the whole answer" || m.calls.Load() != 2 {
				t.Fatalf("the whole answer must be cached: %+v, %v, calls %d", r, err, m.calls.Load())
			}
		})
	}
}

// An answer the provider did not finish, an empty one or a failure is not stored: the
// task retried with the same request gets the provider's new answer, not the cut one.
func TestExactCacheKeepsOnlyWholeAnswers(t *testing.T) {
	cacheKeepsOnlyWholeAnswers(t, func() gateway.Middleware {
		return gateway.ExactCache(gateway.CacheConfig{TTL: time.Hour}, nil)
	})
}

func TestSemanticCacheKeepsOnlyWholeAnswers(t *testing.T) {
	cacheKeepsOnlyWholeAnswers(t, func() gateway.Middleware {
		return gateway.SemanticCache(gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.8, TTL: time.Hour}, nil)
	})
}

// Through the gateway, with both caches: a cut answer is not served again.
func TestGatewayCachesDoNotServeACutAnswer(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
		r := answer("the whole answer")
		if n == 1 {
			r.Message.Content, r.FinishReason = "the whole", llm.FinishLength
		}
		return r, nil
	}}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Cache: &gateway.CacheConfig{TTL: time.Hour},
		Semantic: &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.8, TTL: time.Hour}})
	ctx := context.Background()
	if r, _ := g.Generate(ctx, ask("q")); r.FinishReason != llm.FinishLength {
		t.Fatalf("first: %+v", r)
	}
	if r, _ := g.Generate(ctx, ask("q")); r.Cached || r.FinishReason != "" || r.Message.Content != "the whole answer" || m.calls.Load() != 2 {
		t.Fatalf("second: %+v, calls %d", r, m.calls.Load())
	}
	if r, _ := g.Generate(ctx, ask("q")); !r.Cached || r.Message.Content != "the whole answer" || m.calls.Load() != 2 {
		t.Fatalf("third: %+v, calls %d", r, m.calls.Load())
	}
}
