package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
)

// CacheConfig configures the exact-match cache: an answer is reused for a request
// with the same model, messages and tools (the same llm.PromptHash), in the same
// namespace (the request's agent), within TTL.
type CacheConfig struct {
	TTL time.Duration
	// MaxEntries bounds the cache (default 10,000); the oldest entries go first.
	MaxEntries int
}

// ExactCache answers a request from the answer to an earlier request with the same
// model (the wrapped model's name), messages and tools, in the same namespace, within
// cfg.TTL, without calling the model it wraps; such an answer has Cached set. A request
// with NoCache set bypasses it. Only whole answers the wrapped model gives are stored
// (storable): not an error, an unfinished or empty answer, nor one that a cache below
// served (Cached set). The entries are kept in memory (clock nil: time.Now), shared by
// every model the middleware wraps.
func ExactCache(cfg CacheConfig, clock func() time.Time) Middleware {
	if clock == nil {
		clock = time.Now
	}
	c := newExactCache(cfg, clock)
	return func(next llm.Model) llm.Model {
		return &exactCached{Model: next, name: next.Name(), cache: c}
	}
}

type exactCached struct {
	llm.Model
	name  string
	cache *exactCache
}

func (m *exactCached) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if req.NoCache {
		return m.Model.Generate(ctx, req)
	}
	key := exactKey(m.name, req)
	if r, ok := m.cache.get(key); ok {
		return r, nil
	}
	resp, err := m.Model.Generate(ctx, req)
	if err == nil && storable(resp) {
		m.cache.put(key, resp)
	}
	return resp, err
}

// storable reports whether a cache may keep resp, an answer a model gave: a whole
// one, with content or tool calls, that no cache below served. An answer the
// provider ended before it was finished (a FinishReason: cut at the output limit,
// withheld by its content filter, "safety", …; llm.AbnormalFinish) fails its task,
// and an empty one is no answer: the same request asked again, the task retried,
// must reach the provider again rather than get them back.
func storable(resp llm.Response) bool {
	return !resp.Cached && resp.FinishReason == "" &&
		(resp.Message.Content != "" || len(resp.Message.ToolCalls) > 0)
}

// own returns resp with tool calls of its own: a cache keeps a copy of an answer,
// and serves each caller another, so that no caller changes what the next one gets.
func own(resp llm.Response) llm.Response {
	resp.Message.ToolCalls = slices.Clone(resp.Message.ToolCalls)
	return resp
}

type cacheEntry struct {
	resp    llm.Response
	expires time.Time
}

type exactCache struct {
	cfg   CacheConfig
	clock func() time.Time
	mu    sync.Mutex
	m     map[string]cacheEntry
	order []string
}

func newExactCache(cfg CacheConfig, clock func() time.Time) *exactCache {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 10000
	}
	return &exactCache{cfg: cfg, clock: clock, m: map[string]cacheEntry{}}
}

func exactKey(model string, req llm.Request) string {
	return req.Scope.Agent + "\x00" + model + "\x00" + req.Protocol + "\x00" + llm.PromptHash(req)
}

func (c *exactCache) get(k string) (llm.Response, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !c.clock().Before(e.expires) {
		return llm.Response{}, false
	}
	r := own(e.resp)
	r.Cached = true
	return r, true
}

func (c *exactCache) put(k string, resp llm.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok {
		c.order = append(c.order, k)
	}
	c.m[k] = cacheEntry{resp: own(resp), expires: c.clock().Add(c.cfg.TTL)}
	for len(c.order) > c.cfg.MaxEntries {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}
