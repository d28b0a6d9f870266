package gateway_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// rateLimitedOnce answers 429 (Retry-After: 2) to its first request, then answers.
func rateLimitedOnce(t *testing.T) *openaitest.Server {
	var n atomic.Int32
	return openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		if n.Add(1) == 1 {
			return openaitest.Error(429, "rate limited", "Retry-After", "2")
		}
		return openaitest.Completion(messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
}

func provider(t *testing.T, srv *openaitest.Server, name, key string) *openai.Model {
	t.Helper()
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, APIKey: key, Model: name, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// After a provider's 429 with Retry-After: 2, the calls to that provider (its base
// URL and key) send nothing until the 2 s are over, instead of each finding the
// limit again; a call cancelled meanwhile ends at once, unsent. Each is counted as
// held (RetryPolicy.OnCooldown, the node's metric).
func TestA429CoolsItsProviderDown(t *testing.T) {
	srv := rateLimitedOnce(t)
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	slept, release := make(chan time.Duration, 64), make(chan struct{})
	var held atomic.Int32
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{provider(t, srv, "m", "k1")}, Clock: c.Now,
		Retry: gateway.RetryPolicy{MaxAttempts: 1, OnCooldown: func(_ string, waited bool) {
			if waited {
				held.Add(1)
			}
		}},
		Sleep: func(ctx context.Context, d time.Duration) error {
			slept <- d
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := g.Generate(ctx, ask("first")); err == nil {
		t.Fatal("the 429 answered")
	}
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := g.Generate(ctx, ask("q"))
			errs <- err
		})
	}
	gone, stop := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { _, err := g.Generate(gone, ask("cancelled")); cancelled <- err }()
	for range n + 1 {
		select {
		case d := <-slept:
			if d != 2*time.Second {
				t.Errorf("a call waits %s, want the 2s of Retry-After", d)
			}
		case <-ctx.Done():
			t.Fatal("the calls did not wait for the cooldown")
		}
	}
	if got := len(srv.Requests()); got != 1 {
		t.Fatalf("%d requests during the cooldown, want only the one rate limited", got)
	}
	stop()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled during the cooldown: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("a cancelled call kept waiting for the cooldown")
	}
	c.add(2 * time.Second)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(srv.Requests()); got != 1+n {
		t.Fatalf("%d requests, want %d", got, 1+n)
	}
	if held.Load() != n+1 {
		t.Fatalf("%d calls counted as held, want %d", held.Load(), n+1)
	}
}

// A call to a provider cooling down that a fallback model follows goes to that model
// at once; one whose deadline comes before the cooldown's end fails at once, neither
// sending nor waiting; another key at the same URL is another rate limit.
func TestACoolingProviderIsNotWaitedForWhenItCannotBe(t *testing.T) {
	srv := rateLimitedOnce(t)
	backupSrv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(messages.ChatMessage{Role: messages.RoleAssistant, Content: "backup"}, messages.Usage{PromptTokens: 1})
	})
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	noSleep := func(context.Context, time.Duration) error { t.Error("a call waited"); return nil }
	primary, backup, other := provider(t, srv, "m", "k1"), provider(t, backupSrv, "b", "k1"), provider(t, srv, "m2", "k2")
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{primary, backup}, Routes: [][]llm.Model{{primary}, {other}},
		Clock: c.Now, Sleep: noSleep, Retry: gateway.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, q := range []string{"rate limited", "cooling down"} {
		resp, err := g.Generate(ctx, ask(q))
		if err != nil || resp.Model != "b" {
			t.Fatalf("%s: %+v %v: want the backup's answer", q, resp, err)
		}
	}
	if got := len(srv.Requests()); got != 1 {
		t.Fatalf("%d requests to the provider cooling down, want 1", got)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := g.Generate(short, llm.Request{Messages: ask("q").Messages, Models: []string{"m"}}); !errors.Is(err, gateway.ErrCoolingDown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want ErrCoolingDown and DeadlineExceeded", err)
	}
	if got := len(srv.Requests()); got != 1 {
		t.Fatalf("%d requests to the provider cooling down, want 1", got)
	}
	if _, err := g.Generate(ctx, llm.Request{Messages: ask("q").Messages, Models: []string{"m2"}}); err != nil {
		t.Fatalf("another key at the same URL: %v", err)
	}
}
