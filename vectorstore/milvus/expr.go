package milvus

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/vectorstore"
)

// Field names of every collection's schema.
const (
	fieldID       = "id"
	fieldVector   = "vector"
	fieldText     = "text"
	fieldMetadata = "metadata"
)

// metaKeyPrefix starts every key of the metadata JSON: the caller's key follows,
// hex-encoded. Milvus 2.3 takes the key of a JSON path expression (metadata["…"])
// literally, without unescaping, and splits the path at "][", so a key with a quote,
// a backslash or brackets could not be written in a filter. Hex leaves only [0-9a-f];
// the prefix keeps the empty key a non-empty path.
const metaKeyPrefix = "k"

// encodeKey is the JSON key that stores metadata key k.
func encodeKey(k string) string { return metaKeyPrefix + hex.EncodeToString([]byte(k)) }

// decodeKey inverts encodeKey.
func decodeKey(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, metaKeyPrefix)
	if !ok {
		return "", fmt.Errorf("metadata key %q lacks the prefix %q", s, metaKeyPrefix)
	}
	b, err := hex.DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("metadata key %q: %w", s, err)
	}
	return string(b), nil
}

// encodeMetadata returns the JSON stored in the metadata field: an object with the
// encoded keys and the values as they are.
func encodeMetadata(m map[string]string) ([]byte, error) {
	enc := make(map[string]string, len(m))
	for k, v := range m {
		enc[encodeKey(k)] = v
	}
	return json.Marshal(enc)
}

// decodeMetadata inverts encodeMetadata. An empty object decodes to nil.
func decodeMetadata(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var enc map[string]string
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("metadata JSON: %w", err)
	}
	if len(enc) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(enc))
	for ek, v := range enc {
		k, err := decodeKey(ek)
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}

// quote returns s as a string literal of Milvus's expression language. The server
// reads a double-quoted literal with Go's strconv.Unquote, and its grammar accepts
// every escape strconv.Quote writes (\" \\ \n \t \xNN \uNNNN \UNNNNNNNN …), which
// never leaves a raw quote, backslash or line break inside the literal.
func quote(s string) string { return strconv.Quote(s) }

// filterExpr translates a Query.Filter into a boolean expression: one equality per
// pair, joined with "and", keys sorted so that equal filters give equal expressions.
// An empty filter gives "" (no expression: every item matches). An item lacking a
// key does not match: Milvus's comparison with an absent JSON key is false.
func filterExpr(filter map[string]string) string {
	if len(filter) == 0 {
		return ""
	}
	terms := make([]string, 0, len(filter))
	for _, k := range slices.Sorted(maps.Keys(filter)) {
		terms = append(terms, fmt.Sprintf("%s[%s] == %s", fieldMetadata, quote(encodeKey(k)), quote(filter[k])))
	}
	return strings.Join(terms, " and ")
}

// idsExpr is the expression that selects the items with the given IDs.
func idsExpr(ids []string) string {
	var b strings.Builder
	b.WriteString(fieldID)
	b.WriteString(" in [")
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quote(id))
	}
	b.WriteString("]")
	return b.String()
}

// checkString applies the limits of a Milvus VarChar (or of a string inside the
// metadata JSON) to s: valid UTF-8, since gRPC carries strings as protobuf strings,
// and at most max bytes when max > 0.
func checkString(what, s string, max int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8 (Milvus stores text only)", vectorstore.ErrInvalid, what)
	}
	if max > 0 && len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, Milvus takes at most %d", vectorstore.ErrInvalid, what, len(s), max)
	}
	return nil
}
