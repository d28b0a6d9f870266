package node_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
)

// Milvus unreachable under a running node (a proxy between them cut): a document
// added to a knowledge base is stored and answered 201, and searches by vector and
// hybrid answer from the base's chunk vectors in memory, with a note. Once Milvus
// is back, the document's vectors are in Milvus and searches ask it again, with no
// note.
func TestKnowledgeWhileMilvusIsDown(t *testing.T) {
	addr := milvusAddr(t)
	start := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	px := startCutProxy(t, addr)
	k := newKBNode(t, node.Config{Knowledge: &knowledge.Config{Vectors: newMilvusStore(t, px.Addr(), milvusPrefix(t, addr))}})
	if code, b := k.postText(t, "docs", "guide/install.md", kbInstall); code != http.StatusCreated {
		t.Fatalf("adding a document with Milvus up: %d %s", code, b)
	}
	step("added up")
	px.setCut(true)
	if code, b := k.postText(t, "docs", "guide/limits.md", kbLimits); code != http.StatusCreated {
		t.Fatalf("adding a document while Milvus is down: %d %s; want 201: it is stored in the log", code, b)
	}
	if got := k.ingested(t, "docs"); got["guide/limits.md"] != 1 {
		t.Errorf("the document added while Milvus is down is in the log %d times, want once", got["guide/limits.md"])
	}
	step("added down")
	lags := func(notes []string) bool {
		return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "vector store lags") })
	}
	for _, mode := range []string{"vector", "hybrid"} {
		code, ans, msg := k.search(t, "docs", url.Values{"q": {"a document is at most 32 MiB"}, "mode": {mode}, "limit": {"1"}})
		if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Source != "guide/limits.md" || !lags(ans.Notes) {
			t.Errorf("%s search while Milvus is down: %d %+v %q %q; want guide/limits.md and a note that the store lags", mode, code, ans.Results, ans.Notes, msg)
		}
	}

	step("searched down")
	px.setCut(false)
	// The store is tried again after its retry wait (1 s, then longer), and the
	// first request after Milvus is back may wait out gRPC's reconnection backoff.
	var (
		code int
		ans  node.KBSearchAnswer
		msg  string
	)
	for try := 1; ; try++ {
		code, ans, msg = k.search(t, "docs", url.Values{"q": {"a document is at most 32 MiB"}, "mode": {"vector"}, "limit": {"1"}})
		if code == http.StatusOK && !lags(ans.Notes) || try == 30 {
			break
		}
		time.Sleep(time.Second)
	}
	step("searched back")
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Source != "guide/limits.md" || len(ans.Notes) != 0 {
		t.Errorf("vector search once Milvus is back: %d %+v %q %q; want guide/limits.md from Milvus, no note", code, ans.Results, ans.Notes, msg)
	}
}
