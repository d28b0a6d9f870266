package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// An upload and a removal under Idempotency-Keys, superseded by later versions
// of their documents and enough other writes for compaction to reach their
// events, are sent again to a node restarted on the same log (its table of
// keys empty): the upload's retry answers its first answer and leaves the newer
// version, the removal's answers as it did and leaves the document added again
// since; neither writes an event. Before, compaction deleted their events and
// the retries were decided afresh: the older bytes written over the newer
// version, the document removed again.
func TestKBKeysDecideTheirRetriesAfterCompactionAndRestart(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	first, stop := nodetest.StartWithStop(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}, DataDir: t.TempDir()})
	k := kbNode{n: first, log: lg}
	post := func(source, body string, header ...string) (int, []byte) {
		t.Helper()
		code, b := k.postText(t, "docs", source, body, header...)
		if code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("%s: %d %s", source, code, b)
		}
		return code, b
	}
	post("first.md", "# First\n\nThe base's first document.")
	const a1, a2 = "# A\n\nThe first version of a.", "# A\n\nThe second version of a."
	codeA, answerA := post("a.md", a1, "Idempotency-Key", "a-1")
	post("a.md", a2)
	post("b.md", "# B\n\nThe first version of b.")
	codeB, answerB := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/b.md", "", nil, "Idempotency-Key", "b-removed")
	if codeB != http.StatusOK {
		t.Fatalf("removal of b: %d %s", codeB, answerB)
	}
	post("b.md", "# B\n\nb, added again.")
	for i := range 2*knowledge.CompactTail + 2 {
		post("churn.md", fmt.Sprintf("# Churn\n\nVersion %d of the churning document.", i))
	}
	if n := len(kbEvents(t, k, "docs")); n > knowledge.CompactTail+10 {
		t.Fatalf("the stream holds %d events: not compacted", n)
	}
	stop()

	k = kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	want := hashes(t, k)
	n := len(kbEvents(t, k, "docs"))
	if code, b := k.postText(t, "docs", "a.md", a1, "Idempotency-Key", "a-1"); code != codeA || string(b) != string(answerA) {
		t.Fatalf("the upload's retry: %d %s; want %d %s", code, b, codeA, answerA)
	}
	if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/b.md", "", nil, "Idempotency-Key", "b-removed"); code != codeB || string(b) != string(answerB) {
		t.Fatalf("the removal's retry: %d %s; want %d %s", code, b, codeB, answerB)
	}
	if got := len(kbEvents(t, k, "docs")); got != n {
		t.Fatalf("the retries wrote %d events", got-n)
	}
	if got := hashes(t, k); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the documents after the retries: %v; want %v", got, want)
	}
}

// hashes maps the documents of base docs to their hashes.
func hashes(t *testing.T, k kbNode) map[string]string {
	t.Helper()
	code, b := k.do(t, http.MethodGet, "/v1/kb/docs/documents", "", nil)
	var ans struct{ Documents []knowledge.Document }
	if code != http.StatusOK || json.Unmarshal(b, &ans) != nil {
		t.Fatalf("documents: %d %s", code, b)
	}
	out := map[string]string{}
	for _, d := range ans.Documents {
		out[d.Source] = d.Hash
	}
	return out
}
