package node_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
)

// A node keeps at most knowledge.max_bases knowledge bases in memory, and
// /metrics counts them: the one released past the bound is folded again by its
// next request, which finds its documents.
func TestKnowledgeBasesPastTheBoundAreReleasedAndCounted(t *testing.T) {
	k := newKBNode(t, node.Config{Knowledge: &knowledge.Config{MaxBases: 1, IdleTimeout: -1}})
	loaded := func() string {
		t.Helper()
		code, body := k.do(t, http.MethodGet, "/metrics", "", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d", code)
		}
		m := regexp.MustCompile(`(?m)^troupe_knowledge_bases_loaded (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatal("no troupe_knowledge_bases_loaded on /metrics")
		}
		return string(m[1])
	}
	for _, base := range []string{"install", "limits"} {
		if code, body := k.postText(t, base, base+".md", map[string]string{"install": kbInstall, "limits": kbLimits}[base]); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", base, code, body)
		}
	}
	if n := loaded(); n != "1" {
		t.Fatalf("troupe_knowledge_bases_loaded %s after two bases with max_bases 1; want 1", n)
	}
	code, ans, msg := k.search(t, "install", url.Values{"q": {"Homebrew"}})
	if code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].Source != "install.md" {
		t.Fatalf("search of the released base: %d %q %+v", code, msg, ans)
	}
	if n := loaded(); n != "1" {
		t.Fatalf("troupe_knowledge_bases_loaded %s; want 1", n)
	}
}
