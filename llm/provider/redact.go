package provider

import (
	"cmp"
	"slices"
	"strings"
)

// Redacted replaces secrets in printed text.
const Redacted = "[REDACTED]"

// Redact returns s with every occurrence of each non-empty secret replaced by
// Redacted. Longer secrets are replaced first, so a secret that contains another is
// still removed whole. Use it on any text that may echo a key (provider error bodies,
// request dumps) before it is logged or stored.
func Redact(s string, secrets ...string) string {
	sorted := slices.SortedFunc(slices.Values(secrets), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, secret := range sorted {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, Redacted)
		}
	}
	return s
}
