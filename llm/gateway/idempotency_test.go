package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A model call's idempotency key (llm.Request.Key, the effect key) reaches the
// provider as an Idempotency-Key header, the same on every attempt the gateway
// retries, streamed or not, so a provider that deduplicates by it performs a call
// re-issued after a crash once; a call without a key sends none.
func TestIdempotencyKeyIsSentOnEveryAttempt(t *testing.T) {
	ok := messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}
	for _, streamed := range []bool{false, true} {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(503, "busy"), openaitest.Completion(ok, messages.Usage{PromptTokens: 1}),
			openaitest.Completion(ok, messages.Usage{PromptTokens: 1})))
		m := provider(t, srv, "p", "")
		g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if streamed {
			ctx = llm.WithDeltas(ctx, func(int, llm.Delta) {})
		}
		req := ask("q")
		req.Key = "session-1/7"
		if _, err := g.Generate(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Generate(ctx, ask("no key")); err != nil {
			t.Fatal(err)
		}
		reqs := srv.Requests()
		if len(reqs) != 3 {
			t.Fatalf("streamed %v: %d requests, want 3 (a 503, its retry, a call without a key)", streamed, len(reqs))
		}
		key := reqs[0].Header.Get("Idempotency-Key")
		if !strings.HasPrefix(key, "troupe-") || strings.Contains(key, "session-1") {
			t.Fatalf("streamed %v: Idempotency-Key %q, want a digest of the key (the session is not the provider's to read)", streamed, key)
		}
		for i, want := range []string{key, key, ""} {
			if got := reqs[i].Header.Get("Idempotency-Key"); got != want || want == "" && len(reqs[i].Header.Values("Idempotency-Key")) != 0 {
				t.Errorf("streamed %v: request %d: Idempotency-Key %q, want %q", streamed, i+1, got, want)
			}
		}
	}
}

// A fallback to another model of the same provider is another request: it is sent
// under another Idempotency-Key, so a provider that deduplicates strictly does not
// answer it with the first model's answer, or refuse it as a key reused.
func TestIdempotencyKeyDiffersAcrossAFallback(t *testing.T) {
	ok := messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(400, "bad"), openaitest.Completion(ok, messages.Usage{PromptTokens: 1})))
	var chain []llm.Model
	for _, name := range []string{"big", "small"} {
		chain = append(chain, provider(t, srv, name, ""))
	}
	g, err := gateway.New(gateway.Config{Chain: chain, Retry: gateway.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := ask("q")
	req.Key = "session-1/7"
	if _, err := g.Generate(ctx, req); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2 (the first model refused, the fallback)", len(reqs))
	}
	a, b := reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key")
	if a == "" || b == "" || a == b {
		t.Fatalf("Idempotency-Keys %q and %q: want two keys, one per model", a, b)
	}
}
