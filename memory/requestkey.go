package memory

import (
	"fmt"
	"strings"
)

// requestMark separates, in a key made by RequestKey, the client's key from the
// digest of its request.
const requestMark = "#request="

// RequestKey is the idempotency key of a write made for one request of a client
// (an HTTP Idempotency-Key): key, the client's key, and digest, a digest of the
// request it came with. The key may be sent again with the same request only: an
// Add (or CheckKey) under RequestKey(key, d2) of a namespace where RequestKey(key,
// d1) was applied fails with ErrKeyReused, even when every memory it asks for is
// one the namespace holds (the same content with other metadata, tier or
// importance would otherwise be answered with the first request's IDs, and
// dropped). The same request sent again gets its first result.
func RequestKey(key, digest string) string {
	return key + requestMark + digest
}

// splitRequestKey returns the client's key and the request's digest of a key
// made by RequestKey.
func splitRequestKey(key string) (client, digest string, ok bool) {
	i := strings.LastIndex(key, requestMark)
	if i < 0 {
		return "", "", false
	}
	return key[:i], key[i+len(requestMark):], true
}

// noteRequest records, for a key made by RequestKey, the request its client's key
// was first applied with. The caller holds the state.
func (s *state) noteRequest(key string) {
	client, digest, ok := splitRequestKey(key)
	if !ok {
		return
	}
	if _, seen := s.requests[client]; !seen {
		s.requests[client] = digest
	}
}

// otherRequest fails with ErrKeyReused when key, made by RequestKey, carries a
// client's key that was applied with another request. The caller holds the state.
func (s *state) otherRequest(key string) error {
	client, digest, ok := splitRequestKey(key)
	if !ok {
		return nil
	}
	if was, seen := s.requests[client]; seen && was != digest {
		return fmt.Errorf("%w: key %q was used for another request (not the same memories, namespaces, tiers, metadata or importance)", ErrKeyReused, client)
	}
	return nil
}

// unmarkedKey returns the client's key of key, made by RequestKey, when that key
// was applied as it is, without a request's digest (by a build before
// RequestKey), and key itself was not: a write under key is answered as one
// under the client's key (addedBefore), so that a key in use across an upgrade
// still refuses other memories. It returns "" otherwise. The caller holds the
// state.
func (s *state) unmarkedKey(key string) string {
	client, _, ok := splitRequestKey(key)
	if !ok || s.keys[key] != nil || s.keys[client] == nil {
		return ""
	}
	return client
}
