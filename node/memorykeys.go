package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// An Idempotency-Key of POST /v1/memories names one request: sent again with the
// same request it gets the first answer; sent with another request (other memories,
// another namespace, other metadata, tier or importance) it is refused, 422, and
// nothing is written. Each namespace a request writes to keeps the digest of the
// request beside the key in its events (memory.RequestKey), which holds across
// restarts and nodes. A namespace the key never wrote to cannot tell: the node
// remembers, besides, the digest of the request each recent key came with
// (memoryRequestKeys), so that a key sent again for another namespace is refused
// too, on the node that took it first, for memoryKeyTTL.

// memoryKeyTTL is how long a node remembers the request of an Idempotency-Key
// (Stripe keeps its keys 24 hours), and memoryKeysMax how many keys at most: the
// oldest are let go first.
const (
	memoryKeyTTL  = 24 * time.Hour
	memoryKeysMax = 100_000
)

// memoryRequestKeys maps the recent Idempotency-Keys of POST /v1/memories to the
// digest of their requests. The zero value is ready to use.
type memoryRequestKeys struct {
	mu    sync.Mutex
	keys  map[string]memoryKeyClaim
	order []memoryKeyAt // the claims, oldest first (some since released or claimed again), at most about twice as many as keys
}

type memoryKeyClaim struct {
	digest string
	at     time.Time
}

type memoryKeyAt struct {
	key string
	at  time.Time
}

// claim records that key came with the request of digest at now. It returns false
// when key came with another request within memoryKeyTTL, and whether the claim
// is new (release undoes a new one).
func (k *memoryRequestKeys) claim(key, digest string, now time.Time) (ok, fresh bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]memoryKeyClaim{}
	}
	if c, seen := k.keys[key]; seen && now.Sub(c.at) < memoryKeyTTL {
		return c.digest == digest, false
	}
	for len(k.order) > 0 && (len(k.keys) >= memoryKeysMax || now.Sub(k.order[0].at) >= memoryKeyTTL) {
		oldest := k.order[0]
		k.order = k.order[1:]
		if c, ok := k.keys[oldest.key]; ok && c.at.Equal(oldest.at) {
			delete(k.keys, oldest.key)
		}
	}
	if len(k.order) > 2*len(k.keys)+64 {
		// Most of the order is claims released or claimed again since: kept,
		// they would grow it without bound (a client sending new keys with
		// requests answered 4xx), past memoryKeysMax.
		live := make([]memoryKeyAt, 0, len(k.keys)+1)
		for _, o := range k.order {
			if c, ok := k.keys[o.key]; ok && c.at.Equal(o.at) {
				live = append(live, o)
			}
		}
		k.order = live
	}
	k.keys[key] = memoryKeyClaim{digest: digest, at: now}
	k.order = append(k.order, memoryKeyAt{key: key, at: now})
	return true, true
}

// release forgets the claim of key for digest: its request wrote nothing, so the
// key may come again with another.
func (k *memoryRequestKeys) release(key, digest string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.keys[key]; ok && c.digest == digest {
		delete(k.keys, key)
	}
}

// memoryRequestDigest is the digest of a request of POST /v1/memories: of its
// memories as decoded (memory.DecodeInputs), in order, with their metadata
// compacted, so that the same request sent again with other whitespace is the same.
func memoryRequestDigest(inputs []memory.Input) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, in := range inputs {
		var meta bytes.Buffer
		if len(in.Metadata) > 0 && json.Compact(&meta, in.Metadata) == nil {
			in.Metadata = meta.Bytes()
		}
		_ = enc.Encode(in)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
