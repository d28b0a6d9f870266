package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/llm"
)

// ErrQuotaExceeded is wrapped by the error of a call refused by a token quota. It is
// not transient: the call is not retried and no fallback is tried.
var ErrQuotaExceeded = errors.New("token quota exceeded")

// ErrAllFailed is wrapped when every model of the chain failed.
var ErrAllFailed = errors.New("every model of the fallback chain failed")

// ErrUnknownRoute is wrapped by the error of a request naming a chain of models
// (llm.Request.Models) the gateway was not configured with (Config.Routes). It is
// not transient.
var ErrUnknownRoute = errors.New("no such chain of models on this gateway")

// RetryPolicy bounds retries of transient failures (429, 5xx, timeouts).
type RetryPolicy struct {
	// MaxAttempts per model, first try included (default 4).
	MaxAttempts int
	// Initial and Max bound the exponential backoff (defaults 200 ms and 20 s); the
	// wait is drawn uniformly from [d/2, d) ("equal jitter"). A Retry-After hint
	// longer than the backoff is honoured, up to MaxRetryAfter (default 60 s): a
	// longer hint fails over to the next model instead of waiting.
	Initial, Max, MaxRetryAfter time.Duration
	// OnRetry, when set, is called as a model's call failed with a transient error
	// and is about to be sent again (after the wait): with the model's name and the
	// error. A provider bills each attempt, so an operator counts them (the node's
	// troupe_model_retries_total). It is called on the call's goroutine and must
	// not block.
	OnRetry func(model string, err error)
	// OnCooldown, when set, is called once for each call held back by its
	// provider's cooldown after a 429 (Cooldown): with the model's name, and whether
	// the call waited for the cooldown's end (else it failed over at once, or
	// failed). It is called on the call's goroutine and must not block.
	OnCooldown func(model string, waited bool)
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
	// Chain is tried in order until one model answers. Required. A model named
	// again in a chain (Chain's or a route's: a→b→a) is tried once, where it comes
	// first, and the gateway logs a warning: its retries are spent the first time,
	// and a second round would only double the waits and the spend of a failing call.
	Chain []llm.Model
	// Routes are more chains, which a request asks for by the names of their models
	// (llm.Request.Models: an agent's own model and fallbacks). A model is told by its
	// name: one name in Chain and Routes, or in two routes, is one model (the first
	// given), wrapped once, so its retries, slots and price are its own whichever
	// chain calls it. A request naming a chain that is not among Chain and Routes
	// fails with ErrUnknownRoute. The caches and quotas are shared by every chain.
	Routes [][]llm.Model
	Retry  RetryPolicy
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
	for i, r := range c.Routes {
		if len(r) == 0 {
			errs = append(errs, fmt.Errorf("gateway: routes[%d] has no model", i))
		}
		for j, m := range r {
			if m == nil {
				errs = append(errs, fmt.Errorf("gateway: routes[%d][%d] is nil", i, j))
			}
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

// Gateway is a llm.Model over a fallback chain: the chain of Middleware that New
// composes from a Config. It is safe for concurrent use.
type Gateway struct {
	name  string
	model llm.Model
	// routes are Config.Routes composed, by routeKey of their models' names.
	routes map[string]llm.Model
}

var _ llm.Model = (*Gateway)(nil)

// New builds a gateway: it validates cfg, fills in its defaults, and wraps cfg.Chain
// in the middleware cfg asks for, in the order the package documentation gives.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Retry = cfg.Retry.withDefaults()
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Each model of the chains on its own: priced as itself, its tokens counted, its
	// transient failures retried, each attempt holding one of its provider's slots
	// and streamed when the caller asks for increments (llm.WithDeltas).
	limit := LimitConcurrency(cfg.Concurrency)
	cool := Cooldown(cfg.Retry, cfg.Clock, cfg.Sleep, cfg.Retry.OnCooldown)
	wrapped := map[string]llm.Model{}
	wrap := func(models []llm.Model) []llm.Model {
		out := make([]llm.Model, len(models))
		for i, m := range models {
			w, ok := wrapped[m.Name()]
			if !ok {
				w = Chain(m, Pricing(cfg.Prices), CountTokens(cfg.Tokenizer), Retry(cfg.Retry, cfg.Sleep, cfg.Logger), cool, limit, Streaming())
				wrapped[m.Name()] = w
			}
			out[i] = w
		}
		return out
	}
	// Then each chain as one model: cached answers first, then the quotas, then the
	// models in turn. The caches and quotas are built once, for every chain.
	var mws []Middleware
	if cfg.Cache != nil {
		mws = append(mws, ExactCache(*cfg.Cache, cfg.Clock))
	}
	if cfg.Semantic != nil {
		mws = append(mws, SemanticCache(*cfg.Semantic, cfg.Clock))
	}
	mws = append(mws, Quotas(cfg.Quotas, cfg.Clock))
	compose := func(models []llm.Model) llm.Model {
		chain := wrap(once(models, cfg.Logger))
		return Chain(chain[0], append(slices.Clone(mws), Fallback(cfg.Logger, chain[1:]...))...)
	}
	g := &Gateway{name: cfg.Chain[0].Name(), model: compose(cfg.Chain), routes: map[string]llm.Model{}}
	for _, r := range cfg.Routes {
		key := routeKey(names(r))
		if _, ok := g.routes[key]; !ok {
			g.routes[key] = compose(r)
		}
	}
	warnUnmatched(cfg)
	return g, nil
}

// warnUnmatched logs each price and concurrency limit of cfg whose key no model of
// its chains has (a typo, or a provider's name where a model's is wanted): it is
// never applied, so its model's calls cost 0 or take the default 64 slots.
func warnUnmatched(cfg Config) {
	models, providers := map[string]bool{}, map[string]bool{}
	for _, chain := range append([][]llm.Model{cfg.Chain}, cfg.Routes...) {
		for _, m := range chain {
			models[m.Name()] = true
			if p, ok := m.(ProviderNamer); ok {
				providers[p.Provider()] = true
			} else {
				providers[m.Name()] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Prices)) {
		if !models[name] {
			cfg.Logger.Warn("gateway: a price names no model of this node, and prices nothing: key prices by the model's name",
				"price", name, "models", strings.Join(slices.Sorted(maps.Keys(models)), ", "))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Concurrency)) {
		if !providers[name] {
			cfg.Logger.Warn("gateway: a concurrency limit names no provider of this node's models, and limits nothing: key it by the provider's name",
				"concurrency", name, "providers", strings.Join(slices.Sorted(maps.Keys(providers)), ", "))
		}
	}
}

// once returns models without those named again after their first place in the
// chain, and logs each one it leaves out.
func once(models []llm.Model, logger *slog.Logger) []llm.Model {
	out := make([]llm.Model, 0, len(models))
	for i, m := range models {
		if slices.ContainsFunc(out, func(o llm.Model) bool { return o.Name() == m.Name() }) {
			logger.Warn("gateway: a chain of models names a model twice; it is tried once, where it comes first",
				"model", m.Name(), "chain", strings.Join(names(models), ", "), "place", i)
			continue
		}
		out = append(out, m)
	}
	return out
}

// names are the names of models, in order.
func names(models []llm.Model) []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.Name()
	}
	return out
}

// routeKey is the key of a chain of models in Gateway.routes.
func routeKey(names []string) string { return strings.Join(names, "\x00") }

// Routes reports whether Generate answers a request naming the chain models: an
// empty one (the gateway's own chain), or one of Config.Routes.
func (g *Gateway) Routes(models []string) bool {
	if len(models) == 0 {
		return true
	}
	_, ok := g.routes[routeKey(models)]
	return ok
}

// Name implements llm.Model: the name of the chain's first model.
func (g *Gateway) Name() string { return g.name }

// Generate implements llm.Model. A request naming a chain (llm.Request.Models) goes
// to that chain (Config.Routes); its answer's Model names the model that answered
// whenever that is not the gateway's first model.
func (g *Gateway) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if len(req.Models) == 0 {
		return g.model.Generate(ctx, req)
	}
	m, ok := g.routes[routeKey(req.Models)]
	if !ok {
		return llm.Response{}, fmt.Errorf("gateway: models %s: %w (the node's agents file and models must be the same on every node)",
			strings.Join(req.Models, ", "), ErrUnknownRoute)
	}
	resp, err := m.Generate(ctx, req)
	if err == nil && resp.Model == "" && req.Models[0] != g.name {
		resp.Model = req.Models[0]
	}
	return resp, err
}
