package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// ErrQuotaExceeded is wrapped by the error of a call refused by a token quota. It is
// not transient: the call is not retried and no fallback is tried.
var ErrQuotaExceeded = errors.New("token quota exceeded")

// ErrAllFailed is wrapped when every model of the chain failed.
var ErrAllFailed = errors.New("every model of the fallback chain failed")

// RetryPolicy bounds retries of transient failures (429, 5xx, timeouts).
type RetryPolicy struct {
	// MaxAttempts per model, first try included (default 4).
	MaxAttempts int
	// Initial and Max bound the exponential backoff (defaults 200 ms and 20 s); the
	// wait is drawn uniformly from [d/2, d) ("equal jitter"). A Retry-After hint
	// longer than the backoff is honoured, up to MaxRetryAfter (default 60 s): a
	// longer hint fails over to the next model instead of waiting.
	Initial, Max, MaxRetryAfter time.Duration
}

// Price is the cost of a model in US dollars per million tokens.
type Price struct {
	Prompt     float64 `json:"prompt"`
	Completion float64 `json:"completion"`
	// Cached prices cached prompt tokens; 0 means they cost as much as Prompt.
	Cached float64 `json:"cached"`
}

// Quota limits the tokens (prompt + completion) of one scope over a sliding window.
// Scope is "agent:NAME", "team:NAME" or "key:NAME"; "agent:*" applies to each agent
// separately.
type Quota struct {
	Scope  string
	Tokens int64
	Window time.Duration
}

// Tokenizer counts tokens offline, for providers that report no usage.
type Tokenizer interface {
	Count(text string) int
}

// ProviderNamer is implemented by models that know their provider; concurrency
// limits are per provider. Other models are their own provider (their Name).
type ProviderNamer interface {
	Provider() string
}

// Config configures a Gateway.
type Config struct {
	// Chain is tried in order until one model answers. Required.
	Chain []llm.Model
	Retry RetryPolicy
	// Concurrency bounds calls in flight per provider name; absent means 64.
	Concurrency map[string]int
	Quotas      []Quota
	// Prices by model name; a model without a price costs 0.
	Prices map[string]Price
	// Cache enables the exact-match cache; Semantic the semantic one.
	Cache    *CacheConfig
	Semantic *SemanticConfig
	// Tokenizer counts tokens when a provider reports none (default: the offline
	// estimate of package llm).
	Tokenizer Tokenizer
	Clock     func() time.Time
	// Sleep waits between retries; tests replace it (default: a timer honouring ctx).
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if len(c.Chain) == 0 {
		errs = append(errs, errors.New("gateway: the chain needs at least one model"))
	}
	for i, m := range c.Chain {
		if m == nil {
			errs = append(errs, fmt.Errorf("gateway: chain[%d] is nil", i))
		}
	}
	for _, q := range c.Quotas {
		kind, name, ok := strings.Cut(q.Scope, ":")
		if !ok || name == "" || (kind != "agent" && kind != "team" && kind != "key") {
			errs = append(errs, fmt.Errorf("gateway: quota scope %q: want agent:NAME, team:NAME or key:NAME", q.Scope))
		}
		if q.Tokens <= 0 || q.Window <= 0 {
			errs = append(errs, fmt.Errorf("gateway: quota %s: tokens and window must be positive", q.Scope))
		}
	}
	if c.Retry.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("gateway: Retry.MaxAttempts = %d: want 0 (the default, 4) or more", c.Retry.MaxAttempts))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Initial", c.Retry.Initial}, {"Max", c.Retry.Max}, {"MaxRetryAfter", c.Retry.MaxRetryAfter}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("gateway: Retry.%s = %s: want 0 (the default) or more", d.name, d.v))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Concurrency)) {
		if n := c.Concurrency[name]; n < 1 {
			errs = append(errs, fmt.Errorf("gateway: Concurrency[%q] = %d: want at least 1 call in flight (leave the provider out for 64)", name, n))
		}
	}
	for _, model := range slices.Sorted(maps.Keys(c.Prices)) {
		p := c.Prices[model]
		for _, f := range []struct {
			name string
			v    float64
		}{{"Prompt", p.Prompt}, {"Completion", p.Completion}, {"Cached", p.Cached}} {
			if !(f.v >= 0) || math.IsInf(f.v, 0) {
				errs = append(errs, fmt.Errorf("gateway: Prices[%q].%s = %g: want a finite price of 0 or more", model, f.name, f.v))
			}
		}
	}
	if c.Cache != nil {
		if c.Cache.TTL <= 0 {
			errs = append(errs, fmt.Errorf("gateway: Cache.TTL = %s: want a positive duration", c.Cache.TTL))
		}
		if c.Cache.MaxEntries < 0 {
			errs = append(errs, fmt.Errorf("gateway: Cache.MaxEntries = %d: want 0 (the default, 10,000) or more", c.Cache.MaxEntries))
		}
	}
	if s := c.Semantic; s != nil {
		if s.Embedder == nil {
			errs = append(errs, errors.New("gateway: the semantic cache needs an embedder"))
		}
		if !(s.Threshold > 0 && s.Threshold <= 1) {
			errs = append(errs, fmt.Errorf("gateway: Semantic.Threshold = %g: want a cosine similarity above 0 and at most 1, e.g. 0.95", s.Threshold))
		}
		if s.TTL <= 0 {
			errs = append(errs, fmt.Errorf("gateway: Semantic.TTL = %s: want a positive duration", s.TTL))
		}
		if s.MaxEntries < 0 {
			errs = append(errs, fmt.Errorf("gateway: Semantic.MaxEntries = %d: want 0 (the default, 1,000) or more", s.MaxEntries))
		}
	}
	return errors.Join(errs...)
}

// Gateway is a llm.Model over a fallback chain. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	mu     sync.Mutex
	sems   map[string]chan struct{}
	usage  map[string][]spend // by quota scope key
	exact  *exactCache
	seman  *semanticCache
	name   string
	logger *slog.Logger
}

type spend struct {
	at     time.Time
	tokens int64
}

var _ llm.Model = (*Gateway)(nil)

// New builds a gateway.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &cfg.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 4
	}
	if r.Initial <= 0 {
		r.Initial = 200 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 20 * time.Second
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, sems: map[string]chan struct{}{}, usage: map[string][]spend{}, logger: cfg.Logger}
	names := make([]string, len(cfg.Chain))
	for i, m := range cfg.Chain {
		names[i] = m.Name()
	}
	g.name = names[0]
	if cfg.Cache != nil {
		g.exact = newExactCache(*cfg.Cache, cfg.Clock)
	}
	if cfg.Semantic != nil {
		g.seman = newSemanticCache(*cfg.Semantic, cfg.Clock)
	}
	return g, nil
}

// Name implements llm.Model: the name of the chain's first model.
func (g *Gateway) Name() string { return g.name }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Generate implements llm.Model.
func (g *Gateway) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	var keys cacheKeys
	if !req.NoCache {
		r, k, ok := g.lookup(ctx, req)
		if ok {
			return r, nil
		}
		keys = k
	}
	if err := g.checkQuota(req.Scope); err != nil {
		return llm.Response{}, err
	}
	var errs []error
	for i, m := range g.cfg.Chain {
		resp, err := g.callWithRetries(ctx, m, req)
		if err == nil {
			resp = g.account(m, req, resp)
			if m.Name() != g.name {
				resp.Model = m.Name()
			}
			if !req.NoCache {
				g.store(keys, resp)
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return llm.Response{}, err
		}
		errs = append(errs, err)
		if i < len(g.cfg.Chain)-1 {
			g.logger.Warn("model failed, falling back", "model", m.Name(), "next", g.cfg.Chain[i+1].Name(), "err", err)
		}
	}
	if len(errs) == 1 {
		return llm.Response{}, errs[0]
	}
	return llm.Response{}, fmt.Errorf("%w: %w", ErrAllFailed, errors.Join(errs...))
}

func (g *Gateway) sem(m llm.Model) chan struct{} {
	name := m.Name()
	if p, ok := m.(ProviderNamer); ok {
		name = p.Provider()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sems[name]
	if !ok {
		n := g.cfg.Concurrency[name]
		if n <= 0 {
			n = 64
		}
		s = make(chan struct{}, n)
		g.sems[name] = s
	}
	return s
}

func (g *Gateway) callWithRetries(ctx context.Context, m llm.Model, req llm.Request) (llm.Response, error) {
	sem := g.sem(m)
	backoff := g.cfg.Retry.Initial
	for attempt := 1; ; attempt++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
		resp, err := m.Generate(ctx, req)
		<-sem
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, llm.ErrTransient) || attempt >= g.cfg.Retry.MaxAttempts || ctx.Err() != nil {
			return llm.Response{}, err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if hint, ok := llm.RetryAfter(err); ok {
			if hint > g.cfg.Retry.MaxRetryAfter {
				return llm.Response{}, fmt.Errorf("%w (Retry-After %s is longer than the %s this gateway waits)", err, hint, g.cfg.Retry.MaxRetryAfter)
			}
			wait = max(wait, hint)
		}
		g.logger.Info("retrying model call", "model", m.Name(), "attempt", attempt, "wait", wait, "err", err)
		if err := g.cfg.Sleep(ctx, wait); err != nil {
			return llm.Response{}, err
		}
		backoff = min(backoff*2, g.cfg.Retry.Max)
	}
}

// account fills in token counts a provider did not report, prices the call, and
// charges the quotas.
func (g *Gateway) account(m llm.Model, req llm.Request, resp llm.Response) llm.Response {
	u := &resp.Usage
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens = g.count(req.Messages)
		u.CompletionTokens = g.count([]messages.ChatMessage{resp.Message})
	}
	if p, ok := g.cfg.Prices[m.Name()]; ok {
		cachedPrice := p.Cached
		if cachedPrice == 0 {
			cachedPrice = p.Prompt
		}
		cached := min(u.CachedTokens, u.PromptTokens)
		u.CostUSD = (float64(u.PromptTokens-cached)*p.Prompt + float64(cached)*cachedPrice + float64(u.CompletionTokens)*p.Completion) / 1e6
	}
	g.charge(req.Scope, int64(u.PromptTokens+u.CompletionTokens))
	return resp
}

func (g *Gateway) count(msgs []messages.ChatMessage) int {
	if g.cfg.Tokenizer == nil {
		return llm.EstimateTokens(msgs)
	}
	n := 0
	for _, m := range msgs {
		n += 4 + g.cfg.Tokenizer.Count(m.Content) // 4: the per-message overhead of chat formats
		for _, c := range m.ToolCalls {
			n += g.cfg.Tokenizer.Count(c.Name) + g.cfg.Tokenizer.Count(c.Arguments)
		}
	}
	return n
}

// scopes returns the quota keys a request counts against, with their quotas.
func (g *Gateway) scopes(s llm.Scope) []Quota {
	var out []Quota
	for _, q := range g.cfg.Quotas {
		kind, name, _ := strings.Cut(q.Scope, ":")
		var have string
		switch kind {
		case "agent":
			have = s.Agent
		case "team":
			have = s.Team
		case "key":
			have = s.Key
		}
		if have == "" || (name != "*" && name != have) {
			continue
		}
		q.Scope = kind + ":" + have
		out = append(out, q)
	}
	return out
}

func (g *Gateway) checkQuota(s llm.Scope) error {
	now := g.cfg.Clock()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.scopes(s) {
		used := g.usedLocked(q, now)
		if used >= q.Tokens {
			return fmt.Errorf("%w for %s: %d of %d tokens used in the last %s", ErrQuotaExceeded, q.Scope, used, q.Tokens, q.Window)
		}
	}
	return nil
}

func (g *Gateway) usedLocked(q Quota, now time.Time) int64 {
	spends := g.usage[q.Scope]
	cut := 0
	for cut < len(spends) && now.Sub(spends[cut].at) >= q.Window {
		cut++
	}
	spends = spends[cut:]
	g.usage[q.Scope] = spends
	var used int64
	for _, s := range spends {
		used += s.tokens
	}
	return used
}

func (g *Gateway) charge(s llm.Scope, tokens int64) {
	if tokens <= 0 {
		return
	}
	now := g.cfg.Clock()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.scopes(s) {
		g.usage[q.Scope] = append(g.usage[q.Scope], spend{at: now, tokens: tokens})
	}
}

// cacheKeys are a request's keys in the caches, computed once per call: hashing the
// prompt and embedding the question are the costly part of a lookup.
type cacheKeys struct {
	exact    string
	semantic semanticKey
}

func (g *Gateway) lookup(ctx context.Context, req llm.Request) (llm.Response, cacheKeys, bool) {
	var k cacheKeys
	if g.exact != nil {
		k.exact = exactKey(g.name, req)
		if r, ok := g.exact.get(k.exact); ok {
			return r, k, true
		}
	}
	if g.seman != nil {
		k.semantic = g.seman.key(ctx, g.name, req)
		if r, ok := g.seman.get(k.semantic); ok {
			return r, k, true
		}
	}
	return llm.Response{}, k, false
}

func (g *Gateway) store(k cacheKeys, resp llm.Response) {
	if g.exact != nil {
		g.exact.put(k.exact, resp)
	}
	if g.seman != nil {
		g.seman.put(k.semantic, resp)
	}
}
