package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// A chain that names a model twice (a fallback list that loops back, a→b→a, or
// repeats the node's own model: "model": "openai", "fallbacks": ["openai",
// "offline"]) tries that model once: its retries are spent the first time, and a
// second round would double the waits and the spend of a call that fails. The
// agents file refuses such a chain; the node's model and fallbacks were taken as
// written, so a failing model was retried twice over.
func TestChainNamingAModelTwiceTriesItOnce(t *testing.T) {
	a := &fakeModel{name: "a", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
	b := &fakeModel{name: "b", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
	var sleeps int
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{a, b, a},
		Routes: [][]llm.Model{{b, a, b, a}},
		Retry:  gateway.RetryPolicy{MaxAttempts: 3},
		Sleep:  func(context.Context, time.Duration) error { sleeps++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(context.Background(), ask("q")); !errors.Is(err, gateway.ErrAllFailed) {
		t.Fatalf("err %v, want ErrAllFailed", err)
	}
	if a.calls.Load() != 3 || b.calls.Load() != 3 {
		t.Fatalf("chain a, b, a: a called %d times, b %d times; want 3 each (its attempts, once)", a.calls.Load(), b.calls.Load())
	}
	a.calls.Store(0)
	b.calls.Store(0)
	req := ask("q")
	req.Models = []string{"b", "a", "b", "a"}
	if _, err := g.Generate(context.Background(), req); !errors.Is(err, gateway.ErrAllFailed) {
		t.Fatalf("route b, a, b, a: err %v, want ErrAllFailed", err)
	}
	if a.calls.Load() != 3 || b.calls.Load() != 3 {
		t.Fatalf("route b, a, b, a: a called %d times, b %d times; want 3 each (its attempts, once)", a.calls.Load(), b.calls.Load())
	}
}
