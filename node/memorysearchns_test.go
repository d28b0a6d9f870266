package node_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A memory search without a namespace is refused (400) saying that the namespace
// is missing and what one looks like; it said "empty namespace", as if a
// namespace had been given and were empty.
func TestMemorySearchWithoutANamespaceSaysItIsMissing(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	code, ans := mn.search(t, url.Values{"q": {"sky"}})
	if code != http.StatusBadRequest || !strings.Contains(ans.Error, "namespace is missing") || !strings.Contains(ans.Error, "user:alice") {
		t.Fatalf("GET /v1/memories/search?q=sky: %d %q, want 400 saying the namespace is missing", code, ans.Error)
	}
}
