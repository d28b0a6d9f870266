package gateway_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// fakeModel answers from a function and counts calls.
type fakeModel struct {
	name  string
	calls atomic.Int32
	fn    func(n int, req llm.Request) (llm.Response, error)
}

func (f *fakeModel) Name() string { return f.name }
func (f *fakeModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	n := int(f.calls.Add(1))
	return f.fn(n, req)
}

func answer(s string) llm.Response {
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: s}, Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 5}}
}

func ask(q string) llm.Request {
	return llm.Request{Step: 1, Scope: llm.Scope{Agent: "a"}, Messages: []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: q}}}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// sleeps records the waits of a gateway; when it has a clock, each wait moves it on
// by its length, as a real one passes.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
	clock *clock
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	if s.clock != nil {
		s.clock.add(d)
	}
	return nil
}

func newGateway(t *testing.T, cfg gateway.Config) (*gateway.Gateway, *sleeps, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	s := &sleeps{clock: c}
	cfg.Sleep, cfg.Clock = s.sleep, c.Now
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, s, c
}

func TestRetriesTransientErrorsHonouringRetryAfter(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
		switch n {
		case 1:
			return llm.Response{}, &llm.APIError{StatusCode: 429, RetryAfter: 3 * time.Second}
		case 2:
			return llm.Response{}, &llm.APIError{StatusCode: 503}
		}
		return answer("ok"), nil
	}}
	g, s, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{Initial: 100 * time.Millisecond}})
	r, err := g.Generate(context.Background(), ask("q"))
	if err != nil || r.Message.Content != "ok" || m.calls.Load() != 3 {
		t.Fatalf("%+v %v calls=%d", r, err, m.calls.Load())
	}
	if len(s.waits) != 2 || s.waits[0] < 3*time.Second || s.waits[1] >= 200*time.Millisecond || s.waits[1] < 100*time.Millisecond {
		t.Fatalf("waits %v: want Retry-After 3s honoured, then backoff in [100ms, 200ms)", s.waits)
	}
}

func TestDoesNotRetryWhatCannotSucceed(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 400, Message: "context too long"}
	}}
	g, s, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}})
	_, err := g.Generate(context.Background(), ask("q"))
	var api *llm.APIError
	if !errors.As(err, &api) || m.calls.Load() != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v, calls %d, waits %v", err, m.calls.Load(), s.waits)
	}
}

func TestGivesUpAfterMaxAttemptsAndFallsBack(t *testing.T) {
	down := &fakeModel{name: "primary", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 500}
	}}
	backup := &fakeModel{name: "backup", fn: func(int, llm.Request) (llm.Response, error) { return answer("from backup"), nil }}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{down, backup}, Retry: gateway.RetryPolicy{MaxAttempts: 3}})
	r, err := g.Generate(context.Background(), ask("q"))
	if err != nil || r.Message.Content != "from backup" || r.Model != "backup" || down.calls.Load() != 3 {
		t.Fatalf("%+v %v primary calls %d", r, err, down.calls.Load())
	}
	if g.Name() != "primary" {
		t.Fatal(g.Name())
	}
	// Every model failing is one error naming both.
	backup.fn = func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 401, Message: "bad key"}
	}
	_, err = g.Generate(context.Background(), ask("q2"))
	if !errors.Is(err, gateway.ErrAllFailed) || !strings.Contains(err.Error(), "bad key") {
		t.Fatalf("all failed: %v", err)
	}
}

func TestQuotaRefusesOverTheWindowAndRecovers(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return answer("ok"), nil }} // 15 tokens a call
	g, _, c := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 40, Window: time.Hour}}})
	for i := 0; i < 3; i++ {
		if _, err := g.Generate(context.Background(), ask("q"+string(rune('a'+i)))); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := g.Generate(context.Background(), ask("q4"))
	if !errors.Is(err, gateway.ErrQuotaExceeded) || !strings.Contains(err.Error(), "agent:a: 45 of 40 tokens") || errors.Is(err, llm.ErrTransient) {
		t.Fatalf("quota: %v", err)
	}
	if m.calls.Load() != 3 {
		t.Fatal("a refused call must not reach the model")
	}
	other := ask("q5")
	other.Scope.Agent = "b"
	if _, err := g.Generate(context.Background(), other); err != nil {
		t.Fatalf("another agent has its own quota: %v", err)
	}
	c.add(time.Hour)
	if _, err := g.Generate(context.Background(), ask("q6")); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if _, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Quotas: []gateway.Quota{{Scope: "user", Tokens: 1, Window: time.Hour}}}); err == nil {
		t.Fatal("a bad quota scope must be refused")
	}
}

func TestCostAndOfflineTokenCounts(t *testing.T) {
	m := &fakeModel{name: "priced", fn: func(int, llm.Request) (llm.Response, error) {
		r := answer("ok")
		r.Usage = messages.Usage{PromptTokens: 1000, CompletionTokens: 500, CachedTokens: 400}
		return r, nil
	}}
	silent := &fakeModel{name: "silent", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "an answer of some length"}}, nil
	}}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Prices: map[string]gateway.Price{"priced": {Prompt: 2, Completion: 8, Cached: 1}}})
	r, err := g.Generate(context.Background(), ask("q"))
	want := (600*2.0 + 400*1.0 + 500*8.0) / 1e6
	if err != nil || r.Usage.CostUSD < want-1e-12 || r.Usage.CostUSD > want+1e-12 {
		t.Fatalf("cost %v, want %v (%v)", r.Usage.CostUSD, want, err)
	}
	g2, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{silent}})
	r, _ = g2.Generate(context.Background(), ask("how long is this?"))
	if r.Usage.PromptTokens == 0 || r.Usage.CompletionTokens == 0 {
		t.Fatalf("tokens must be counted offline when the provider reports none: %+v", r.Usage)
	}
}

func TestExactCache(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) { return answer("answer"), nil }}
	g, _, c := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Cache: &gateway.CacheConfig{TTL: time.Minute}})
	ctx := context.Background()
	first, _ := g.Generate(ctx, ask("q"))
	second, _ := g.Generate(ctx, ask("q"))
	if first.Cached || !second.Cached || second.Message.Content != "answer" || m.calls.Load() != 1 {
		t.Fatalf("first %+v second %+v calls %d", first, second, m.calls.Load())
	}
	bypass := ask("q")
	bypass.NoCache = true
	if r, _ := g.Generate(ctx, bypass); r.Cached || m.calls.Load() != 2 {
		t.Fatal("NoCache must reach the model")
	}
	otherNS := ask("q")
	otherNS.Scope.Agent = "b"
	if r, _ := g.Generate(ctx, otherNS); r.Cached {
		t.Fatal("namespaces must not share entries")
	}
	c.add(2 * time.Minute)
	if r, _ := g.Generate(ctx, ask("q")); r.Cached {
		t.Fatal("an expired entry must not answer")
	}
}

func TestSemanticCache(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, req llm.Request) (llm.Response, error) { return answer("paris"), nil }}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Semantic: &gateway.SemanticConfig{
		Embedder: llm.HashingEmbedder{}, Threshold: 0.8, TTL: time.Hour}})
	ctx := context.Background()
	g.Generate(ctx, ask("What is the capital of France?"))
	r, _ := g.Generate(ctx, ask("what is the capital of france"))
	if !r.Cached || m.calls.Load() != 1 {
		t.Fatalf("a near-identical question must hit: %+v", r)
	}
	if r, _ := g.Generate(ctx, ask("How many moons does Jupiter have?")); r.Cached {
		t.Fatal("a different question must miss")
	}
	// A mid-task request (ending with a tool result) is never answered from the cache.
	mid := ask("What is the capital of France?")
	mid.Messages = append(mid.Messages, messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "1", Name: "x"}}},
		messages.ChatMessage{Role: messages.RoleTool, ToolCallID: "1", Content: "r"})
	if r, _ := g.Generate(ctx, mid); r.Cached {
		t.Fatal("mid-task requests must not hit the semantic cache")
	}
	if _, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Semantic: &gateway.SemanticConfig{}}); err == nil {
		t.Fatal("a semantic cache without an embedder must be refused")
	}
}

func TestConcurrencyLimitPerProvider(t *testing.T) {
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	m := &fakeModel{name: "slow", fn: func(int, llm.Request) (llm.Response, error) {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		inflight.Add(-1)
		return answer("ok"), nil
	}}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{m}, Concurrency: map[string]int{"slow": 2}})
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := g.Generate(context.Background(), ask(string(rune('a'+i)))); err != nil {
				t.Error(err)
			}
		}(i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for inflight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a third call to slip in, if the limit leaked
	close(release)
	wg.Wait()
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, limit 2", peak.Load())
	}
}

func TestCancellationStopsRetries(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 100, Initial: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Generate(ctx, ask("q")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

// Values that cannot work are refused, each naming the field and the value; zero
// values that mean "the default" are not.
func TestValidateNamesTheBadField(t *testing.T) {
	chain := []llm.Model{llm.Offline{}}
	cases := []struct {
		name string
		cfg  gateway.Config
		want string
	}{
		{"concurrency 0", gateway.Config{Chain: chain, Concurrency: map[string]int{"openai": 0}}, `Concurrency["openai"] = 0`},
		{"concurrency -1", gateway.Config{Chain: chain, Concurrency: map[string]int{"openai": -1}}, `Concurrency["openai"] = -1`},
		{"negative price", gateway.Config{Chain: chain, Prices: map[string]gateway.Price{"m": {Prompt: -1}}}, `Prices["m"].Prompt = -1`},
		{"NaN price", gateway.Config{Chain: chain, Prices: map[string]gateway.Price{"m": {Completion: math.NaN()}}}, `Prices["m"].Completion = NaN`},
		{"cache TTL", gateway.Config{Chain: chain, Cache: &gateway.CacheConfig{TTL: -5 * time.Minute}}, "Cache.TTL = -5m0s"},
		{"cache entries", gateway.Config{Chain: chain, Cache: &gateway.CacheConfig{TTL: time.Minute, MaxEntries: -1}}, "Cache.MaxEntries = -1"},
		{"threshold 7", gateway.Config{Chain: chain, Semantic: &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 7, TTL: time.Hour}}, "Semantic.Threshold = 7"},
		{"threshold 0", gateway.Config{Chain: chain, Semantic: &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, TTL: time.Hour}}, "Semantic.Threshold = 0"},
		{"semantic TTL", gateway.Config{Chain: chain, Semantic: &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.9}}, "Semantic.TTL = 0s"},
		{"retry backoff", gateway.Config{Chain: chain, Retry: gateway.RetryPolicy{Initial: -time.Second}}, "Retry.Initial = -1s"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %s", c.name, err, c.want)
		}
	}
	ok := gateway.Config{Chain: chain, Concurrency: map[string]int{"openai": 8}, Prices: map[string]gateway.Price{"m": {Prompt: 0.15, Completion: 0.6}},
		Cache: &gateway.CacheConfig{TTL: time.Minute}, Semantic: &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.95, TTL: time.Hour}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
