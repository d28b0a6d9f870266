package gateway

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// SemanticConfig configures the semantic cache: the opening request of a task (the
// conversation ends with a user message) is answered from a cached answer when its
// user message embeds within Threshold cosine similarity of a cached one, for the same
// model, the same messages before it (the system prompt, a session's earlier turns)
// and the same tools, in the same namespace (the request's agent).
type SemanticConfig struct {
	Embedder  llm.Embedder
	Threshold float64 // e.g. 0.95
	TTL       time.Duration
	// MaxEntries bounds each namespace (default 1,000).
	MaxEntries int
}

// SemanticCache answers the opening request of a task from the answer to an earlier
// one whose user message embeds within cfg.Threshold cosine similarity (see
// SemanticConfig), without calling the model it wraps; such an answer has Cached set.
// A request with NoCache set bypasses it; a request whose text cannot be embedded
// (the embedder failed, or ctx ended) is a miss. Only whole answers the wrapped model
// gives are stored, as by ExactCache (storable): not an error, an unfinished or empty
// answer, nor one that a cache below served (Cached set). The entries are kept in
// memory (clock nil: time.Now), shared by every model the middleware wraps. Without
// an embedder (which Config.Validate refuses), the middleware wraps nothing.
func SemanticCache(cfg SemanticConfig, clock func() time.Time) Middleware {
	if cfg.Embedder == nil {
		return func(next llm.Model) llm.Model { return next }
	}
	if clock == nil {
		clock = time.Now
	}
	c := newSemanticCache(cfg, clock)
	return func(next llm.Model) llm.Model {
		return &semanticCached{Model: next, name: next.Name(), cache: c}
	}
}

type semanticCached struct {
	llm.Model
	name  string
	cache *semanticCache
}

func (m *semanticCached) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if req.NoCache {
		return m.Model.Generate(ctx, req)
	}
	// The key is computed (the text embedded) once, for the lookup and the store.
	key := m.cache.key(ctx, m.name, req)
	if r, ok := m.cache.get(key); ok {
		return r, nil
	}
	resp, err := m.Model.Generate(ctx, req)
	if err == nil && storable(resp) {
		m.cache.put(key, resp)
	}
	return resp, err
}

type semanticEntry struct {
	vec     []float32
	prefix  string
	resp    llm.Response
	expires time.Time
}

type semanticCache struct {
	cfg   SemanticConfig
	clock func() time.Time
	mu    sync.Mutex
	ns    map[string][]semanticEntry
}

func newSemanticCache(cfg SemanticConfig, clock func() time.Time) *semanticCache {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 1000
	}
	return &semanticCache{cfg: cfg, clock: clock, ns: map[string][]semanticEntry{}}
}

// semanticParts returns the text to embed (the final user message) and the exact
// prefix that must match (the model, and every message before the final one with
// the tools, schemas and all: a session's later question means what it means after
// its own conversation), or ok=false when the request is not a task's opening
// request.
func semanticParts(model string, req llm.Request) (text, prefix string, ok bool) {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != messages.RoleUser {
		return "", "", false
	}
	before := llm.PromptHash(llm.Request{Messages: req.Messages[:n-1], Tools: req.Tools})
	return req.Messages[n-1].Content, model + "\x00" + before, true
}

// semanticKey is what the semantic cache looks a request up by, and stores its answer
// under.
type semanticKey struct {
	ns, prefix string
	vec        []float32 // nil when the request is not cacheable or embedding failed
}

func (c *semanticCache) key(ctx context.Context, model string, req llm.Request) semanticKey {
	text, prefix, ok := semanticParts(model, req)
	if !ok {
		return semanticKey{}
	}
	vecs, err := c.cfg.Embedder.Embed(ctx, []string{text})
	if err != nil || len(vecs) != 1 {
		return semanticKey{} // a cache miss, not a failure
	}
	return semanticKey{ns: req.Scope.Agent + "\x00" + req.Protocol, prefix: prefix, vec: vecs[0]}
}

func (c *semanticCache) get(k semanticKey) (llm.Response, bool) {
	if k.vec == nil {
		return llm.Response{}, false
	}
	now := c.clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	best, bestScore := -1, c.cfg.Threshold
	entries := c.ns[k.ns]
	for i, e := range entries {
		if e.prefix != k.prefix || !now.Before(e.expires) {
			continue
		}
		if s := cosine(k.vec, e.vec); s >= bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return llm.Response{}, false
	}
	r := own(entries[best].resp)
	r.Cached = true
	return r, true
}

func (c *semanticCache) put(k semanticKey, resp llm.Response) {
	if k.vec == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entries := append(c.ns[k.ns], semanticEntry{vec: k.vec, prefix: k.prefix, resp: own(resp), expires: c.clock().Add(c.cfg.TTL)})
	if len(entries) > c.cfg.MaxEntries {
		entries = entries[len(entries)-c.cfg.MaxEntries:]
	}
	c.ns[k.ns] = entries
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return -1
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return -1
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}
