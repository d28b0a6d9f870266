// Package jsonkeys finds what encoding/json lets through in a JSON object's
// member names: a member named as a known one but for case, which it takes for
// that one (the last written winning).
package jsonkeys

import (
	"encoding/json"
	"slices"
	"strings"
)

// Miscased returns the first member of obj, in sorted order, whose name is one
// of names but for case ("Kind" for "kind"), and that name.
func Miscased(obj map[string]json.RawMessage, names []string) (member, want string, ok bool) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				return k, n, true
			}
		}
	}
	return "", "", false
}
