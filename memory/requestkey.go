package memory

import (
	"fmt"
	"strconv"
	"strings"
)

// requestMark separates, in a key made by RequestKey, the client's key from the
// digest of its request; partMark, in one made by RequestPartKey, the digest
// from the part.
const (
	requestMark = "#request="
	partMark    = "#part="
)

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

// RequestPartKey is the idempotency key of part (0, 1, …) of a request written in
// parts, each under a key of its own (a node that routes memory writes cuts a
// namespace's share of a request past its message size): as RequestKey, the
// parts name the client's key, so that the key sent again with another request is
// refused whether either request was written whole or in parts.
func RequestPartKey(key, digest string, part int) string {
	return RequestKey(key, digest) + partMark + strconv.Itoa(part)
}

// splitRequestKey returns the client's key and the request's digest of a key
// made by RequestKey or RequestPartKey, and the key the same write had before
// keys carried their request's digest: the client's key, and "/<part>" for a
// part.
func splitRequestKey(key string) (client, digest, unmarked string, ok bool) {
	i := strings.LastIndex(key, requestMark)
	if i < 0 {
		return "", "", "", false
	}
	client, digest = key[:i], key[i+len(requestMark):]
	unmarked = client
	if d, part, ok := strings.Cut(digest, partMark); ok {
		digest, unmarked = d, client+"/"+part
	}
	return client, digest, unmarked, true
}

// ClientKey returns the key its client sent of key, made by RequestKey or
// RequestPartKey, and true; key itself and false when it carries no request's
// digest: what a memory's history, and a reader of a namespace's events, shows.
func ClientKey(key string) (string, bool) {
	if client, _, _, ok := splitRequestKey(key); ok {
		return client, true
	}
	return key, false
}

// noteRequest records, for a key made by RequestKey (or RequestPartKey), the request its client's key
// was first applied with. The caller holds the state.
func (s *state) noteRequest(key string) {
	client, digest, _, ok := splitRequestKey(key)
	if !ok {
		return
	}
	if _, seen := s.requests[client]; !seen {
		s.requests[client] = digest
	}
}

// requestNoted reports whether the client's key of key, made by RequestKey (or
// RequestPartKey), was applied with a request (noteRequest); false for a key
// without a request's digest. The caller holds the state.
func (s *state) requestNoted(key string) bool {
	client, _, _, ok := splitRequestKey(key)
	if !ok {
		return false
	}
	_, seen := s.requests[client]
	return seen
}

// otherRequest fails with ErrKeyReused when key, made by RequestKey (or
// RequestPartKey), carries a
// client's key that was applied with another request. The caller holds the state.
func (s *state) otherRequest(key string) error {
	client, digest, _, ok := splitRequestKey(key)
	if !ok {
		return nil
	}
	if was, seen := s.requests[client]; seen && was != digest {
		return fmt.Errorf("%w: key %q was used for another request (not the same memories, namespaces, tiers, metadata or importance)", ErrKeyReused, client)
	}
	return nil
}

// unmarkedKey returns the key of the same write without a digest (the client's
// key of key, made by RequestKey; with "/<part>" for RequestPartKey) when that key
// was applied as it is, without a request's digest (by a build before
// RequestKey), and key itself was not: a write under key is answered as one
// under the client's key (addedBefore), so that a key in use across an upgrade
// still refuses other memories. It returns "" otherwise. The caller holds the
// state.
func (s *state) unmarkedKey(key string) string {
	_, _, unmarked, ok := splitRequestKey(key)
	if !ok || s.keys[key] != nil || s.keys[unmarked] == nil {
		return ""
	}
	return unmarked
}
