package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"
)

// requestKeyTTL is how long a node remembers the request of an Idempotency-Key
// (Stripe keeps its keys 24 hours), and requestKeysMax how many keys at most: the
// oldest are let go first.
const (
	requestKeyTTL  = 24 * time.Hour
	requestKeysMax = 100_000
)

// requestKeys maps the recent Idempotency-Keys of a route (POST /v1/memories; the
// writes of /v1/kb) to the digest of their requests (requestDigest), so that a key
// sent again with another request is refused, also where the entity it first
// wrote to cannot tell (another namespace, another knowledge base). The zero value
// is ready to use.
type requestKeys struct {
	mu    sync.Mutex
	keys  map[string]requestKeyClaim
	order []requestKeyAt // the claims, oldest first (some since released or claimed again), at most about twice as many as keys
}

type requestKeyClaim struct {
	digest string
	at     time.Time
}

type requestKeyAt struct {
	key string
	at  time.Time
}

// claim records that key came with the request of digest at now. It returns false
// when key came with another request within requestKeyTTL, and whether the claim
// is new (release undoes a new one).
func (k *requestKeys) claim(key, digest string, now time.Time) (ok, fresh bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]requestKeyClaim{}
	}
	if c, seen := k.keys[key]; seen && now.Sub(c.at) < requestKeyTTL {
		return c.digest == digest, false
	}
	for len(k.order) > 0 && (len(k.keys) >= requestKeysMax || now.Sub(k.order[0].at) >= requestKeyTTL) {
		oldest := k.order[0]
		k.order = k.order[1:]
		if c, ok := k.keys[oldest.key]; ok && c.at.Equal(oldest.at) {
			delete(k.keys, oldest.key)
		}
	}
	if len(k.order) > 2*len(k.keys)+64 {
		// Most of the order is claims released or claimed again since: kept,
		// they would grow it without bound (a client sending new keys with
		// requests answered 4xx), past requestKeysMax.
		live := make([]requestKeyAt, 0, len(k.keys)+1)
		for _, o := range k.order {
			if c, ok := k.keys[o.key]; ok && c.at.Equal(o.at) {
				live = append(live, o)
			}
		}
		k.order = live
	}
	k.keys[key] = requestKeyClaim{digest: digest, at: now}
	k.order = append(k.order, requestKeyAt{key: key, at: now})
	return true, true
}

// release forgets the claim of key for digest: its request wrote nothing, so the
// key may come again with another.
func (k *requestKeys) release(key, digest string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.keys[key]; ok && c.digest == digest {
		delete(k.keys, key)
	}
}

// requestDigest is the digest of a request made of vs, each in its canonical form
// (its caller's to make: canonicalInput, kbRequest), encoded as JSON in order.
func requestDigest(vs ...any) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, v := range vs {
		_ = enc.Encode(v)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
