package node_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A search or history request that gives a parameter twice is refused with the
// reason, not answered for the first of them as though for both.
func TestMemoryQueryParameterGivenTwiceIsRefused(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	ids := mn.mustPost(t, `[{"namespace":"user:alice","tier":"semantic","content":"Alice lives in Porto"},
		{"namespace":"user:bob","tier":"semantic","content":"Bob lives in Porto"}]`)
	for _, q := range []url.Values{
		{"namespace": {"user:alice", "user:bob"}, "q": {"Porto"}},
		{"namespace": {"user:alice"}, "q": {"Porto", "Lisbon"}},
		{"namespace": {"user:alice"}, "q": {"Porto"}, "limit": {"1", "100"}},
		{"namespace": {"user:alice"}, "q": {"Porto"}, "tier": {"semantic", "episodic"}},
		{"namespace": {"user:alice"}, "q": {"Porto"}, "mode": {"keyword", "vector"}},
	} {
		code, ans := mn.search(t, q)
		if code != http.StatusBadRequest || len(ans.Results) != 0 || !strings.Contains(ans.Error, "given 2 times") {
			t.Errorf("search %s: %d %d results %q; want 400 saying a parameter is given twice", q.Encode(), code, len(ans.Results), ans.Error)
		}
	}
	if code, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"Porto"}, "tier": {"semantic,episodic"}}); code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ID != ids[0] {
		t.Errorf("a search with one of each: %d %+v", code, ans)
	}
	code, b := mn.do(t, http.MethodGet, "/v1/memories/"+ids[0]+"/history?namespace=user:bob&namespace=user:alice", "", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(b), "given 2 times") {
		t.Errorf("history with two namespaces: %d %s; want 400", code, b)
	}
	if code, h := mn.history(t, ids[0], "user:alice"); code != http.StatusOK || len(h.History) != 1 {
		t.Errorf("history with one namespace: %d %+v", code, h)
	}
}
