package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// TestMemorySearchQueryNotUTF8IsRefused: a memory search's q that is not UTF-8
// (%FF in the URL) is refused naming it, as a knowledge base's search refuses
// it: it was searched as another text (the embedder's JSON, and a cluster's
// routing of the search to the namespace's owner, put U+FFFD for each bad byte).
func TestMemorySearchQueryNotUTF8IsRefused(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	mn.mustPost(t, `{"namespace":"user:alice","tier":"episodic","content":"Alice moved to Lisbon"}`)
	for _, q := range []string{"%FF%FE", "Alice%C3"} {
		code, b := mn.do(t, http.MethodGet, "/v1/memories/search?namespace=user:alice&q="+q, "", nil)
		if code != http.StatusBadRequest || !strings.Contains(string(b), "UTF-8") {
			t.Errorf("q=%s: %d %s, want 400 saying q is not UTF-8", q, code, b)
		}
	}
	if code, b := mn.do(t, http.MethodGet, "/v1/memories/search?namespace=user:alice&q=Lisb%C3%B3n", "", nil); code != http.StatusOK {
		t.Errorf("q in UTF-8: %d %s", code, b)
	}
}
