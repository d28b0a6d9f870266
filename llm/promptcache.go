package llm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/troupe-run/troupe/messages"
)

// The block rule of PromptCache, OpenAI's: a prompt's prefix is cached only from
// PromptCacheMinTokens tokens on, and a hit counts whole blocks of
// PromptCacheBlockTokens tokens (1024, 1152, 1280, …).
const (
	PromptCacheMinTokens   = 1024
	PromptCacheBlockTokens = 128
)

// DefaultPromptCacheEntries is the capacity of a PromptCache made with a
// non-positive one: prefixes remembered before the oldest are forgotten.
const DefaultPromptCacheEntries = 1 << 16

// PromptCache simulates a provider's prompt cache (a prefix cache) for the models
// that have none, the offline and scripted models, so that what a real provider
// would report as cached tokens shows in their usage too: Observe says how many of a
// request's prompt tokens an earlier request of the process had sent as its own
// prefix, and remembers the request's prefixes for later ones.
//
// Like a provider, it keys a prefix by the tool definitions first, then the
// messages in order (a provider renders the tools ahead of the conversation, so a
// changed tool section breaks every prefix after it). It compares whole messages: a
// message that differs from the earlier request's at that position ends the shared
// prefix, even when the two begin alike. The tokens are the offline estimate of the
// shared messages (EstimateTokens, which leaves the tools out, as the offline and
// scripted models' prompt token counts do), counted by the block rule above; so a
// request's cached tokens never exceed its prompt tokens.
//
// It remembers at most its capacity of prefixes (one per message of each request),
// forgetting the oldest first, as a provider's cache expires entries. It is safe for
// concurrent use. Its answers depend on the requests the process sent before, so
// they are not a function of one request: they reach a session only as a model's
// recorded answer (messages.ModelResponded.Usage), which replay reads back.
type PromptCache struct {
	mu       sync.Mutex
	seen     map[prefixKey]struct{}
	order    []prefixKey // a ring of the remembered keys, oldest at next once full
	next     int
	capacity int
}

// prefixKey names a prefix of a request: its tools and its first messages.
type prefixKey [16]byte

// NewPromptCache returns an empty cache that remembers up to entries prefixes
// (DefaultPromptCacheEntries when entries ≤ 0).
func NewPromptCache(entries int) *PromptCache {
	if entries <= 0 {
		entries = DefaultPromptCacheEntries
	}
	return &PromptCache{seen: make(map[prefixKey]struct{}), capacity: entries}
}

// Observe returns the cached tokens of req, by the block rule, and remembers its
// prefixes. A nil cache caches nothing.
func (c *PromptCache) Observe(req Request) int {
	if c == nil {
		return 0
	}
	keys := prefixKeys(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	shared := 0 // how many leading messages an earlier request had
	for i, k := range keys[1:] {
		if _, ok := c.seen[k]; !ok {
			break
		}
		shared = i + 1
	}
	if _, ok := c.seen[keys[0]]; !ok {
		shared = 0 // other tools: nothing after them is shared
	}
	for _, k := range keys {
		c.remember(k)
	}
	return CachedBlocks(EstimateTokens(req.Messages[:shared]))
}

// remember adds k, forgetting the oldest key when the cache is full.
func (c *PromptCache) remember(k prefixKey) {
	if _, ok := c.seen[k]; ok {
		return
	}
	if len(c.order) < c.capacity {
		c.order = append(c.order, k)
	} else {
		delete(c.seen, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % c.capacity
	}
	c.seen[k] = struct{}{}
}

// CachedBlocks returns the cached tokens a provider reports for a shared prefix of
// tokens tokens: 0 below PromptCacheMinTokens, else whole blocks of
// PromptCacheBlockTokens.
func CachedBlocks(tokens int) int {
	if tokens < PromptCacheMinTokens {
		return 0
	}
	return tokens / PromptCacheBlockTokens * PromptCacheBlockTokens
}

// prefixKeys returns the keys of req's prefixes: keys[0] of its tools alone,
// keys[i] of its tools and its first i messages. Each key chains the one before, so
// equal keys mean equal prefixes (up to a collision of 128-bit hashes).
func prefixKeys(req Request) []prefixKey {
	keys := make([]prefixKey, 1, len(req.Messages)+1)
	tools, err := json.Marshal(req.Tools)
	if err != nil { // fixed struct types: it cannot fail
		tools = nil
	}
	keys[0] = chain(prefixKey{}, tools)
	var buf []byte
	for _, m := range req.Messages {
		buf = appendMessage(buf[:0], m)
		keys = append(keys, chain(keys[len(keys)-1], buf))
	}
	return keys
}

// chain returns the key of a prefix whose key is prev followed by b.
func chain(prev prefixKey, b []byte) prefixKey {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(b)
	var sum [sha256.Size]byte
	var k prefixKey
	copy(k[:], h.Sum(sum[:0]))
	return k
}

// appendMessage appends an unambiguous encoding of m to b: each field length-prefixed.
func appendMessage(b []byte, m messages.ChatMessage) []byte {
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(string(m.Role))
	field(m.Content)
	field(m.Name)
	field(m.ToolCallID)
	b = binary.AppendUvarint(b, uint64(len(m.ToolCalls)))
	for _, c := range m.ToolCalls {
		field(c.ID)
		field(c.Name)
		field(c.Arguments)
	}
	return b
}
