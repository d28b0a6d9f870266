package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// An Idempotency-Key of the knowledge API names one request, as one of POST
// /v1/memories does: the identical request sent again gets the first answer; the
// key sent with another request — for another knowledge base, with another
// document in the same base after a write that changed nothing, or to remove
// what it added — is refused, 422, and nothing is written. A request refused
// (4xx) leaves its key free. After a restart the base still refuses another
// document under a key it recorded, and answers the identical request. Before,
// the keys were kept per base: the key sent for another base was written there
// (201), and one whose write changed nothing was free for any other document.
func TestKBIdempotencyKeyNamesOneRequest(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	first, stop := nodetest.StartWithStop(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}, DataDir: t.TempDir()})
	k := kbNode{n: first, log: lg}
	reused := func(what string, code int, b []byte) {
		t.Helper()
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "Idempotency-Key reused with a different request") {
			t.Errorf("%s: %d %s; want 422 Idempotency-Key reused with a different request", what, code, b)
		}
	}

	code, added := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k1")
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, added)
	}
	code, b := k.postText(t, "notes", "install.md", kbInstall, "Idempotency-Key", "k1")
	reused("the key for another base", code, b)
	if got := k.ingested(t, "notes"); len(got) != 0 {
		t.Errorf("the other base holds %v; want nothing", got)
	}
	code, b = k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k1")
	if code != http.StatusCreated || string(b) != string(added) {
		t.Errorf("the identical request again: %d %s; want 201 %s", code, b, added)
	}
	code, b = k.do(t, http.MethodDelete, "/v1/kb/docs/documents/install.md", "", nil, "Idempotency-Key", "k1")
	reused("the key to remove what it added", code, b)

	// A write that changed nothing (the document was stored) records its
	// key's mark only: its key is still the request's.
	if code, b := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2"); code != http.StatusOK {
		t.Fatalf("the stored document again: %d %s; want 200 unchanged", code, b)
	}
	code, b = k.postText(t, "docs", "limits.md", kbLimits, "Idempotency-Key", "k2")
	reused("the key of an unchanged write with another document", code, b)
	code, b = k.upload(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2")
	reused("the key of a JSON text with the same bytes as a file", code, b)

	// A refused request wrote nothing: its key may come with another.
	if code, b := k.postText(t, "docs", "empty.md", "  \n ", "Idempotency-Key", "k3"); code != http.StatusBadRequest {
		t.Fatalf("an empty document: %d %s; want 400", code, b)
	}
	if code, b := k.postText(t, "docs", "limits.md", kbLimits, "Idempotency-Key", "k3"); code != http.StatusCreated {
		t.Fatalf("the key of a refused request with another: %d %s; want 201", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != 2 || got["install.md"] != 1 || got["limits.md"] != 1 {
		t.Fatalf("ingested %v; want install.md and limits.md once", got)
	}
	stop()

	k = kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	code, b = k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k1")
	if code != http.StatusCreated || string(b) != string(added) {
		t.Errorf("after a restart, the identical request again: %d %s; want 201 %s", code, b, added)
	}
	code, b = k.postText(t, "docs", "other.md", "# Other\n\ntext", "Idempotency-Key", "k1")
	reused("after a restart, the key with another document", code, b)
	if got := k.ingested(t, "docs"); len(got) != 2 {
		t.Fatalf("ingested %v; want install.md and limits.md only", got)
	}
}
