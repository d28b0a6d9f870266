package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// kbMarks counts the key's marks (messages.KBKeyPart) of a base by key.
func (k kbNode) kbMarks(t *testing.T, base string) map[string]int {
	t.Helper()
	events, err := k.log.Read(context.Background(), knowledge.Stream(base), 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok && in.Part == messages.KBKeyPart {
			out[in.Key]++
		}
	}
	return out
}

// TestKBIdempotencyKeyOfAnUnchangedDocumentAfterARestart: a document sent again
// unchanged under a new Idempotency-Key writes no version of it, but the key's
// mark: after a restart (or on another node), where the node's table of recent
// keys is empty, the key sent with another document is refused, 422, and
// nothing is written; the original request sent again gets its first answer
// (200 unchanged). Before, the write of the unchanged document stored nothing
// of its key: the key with another document was answered 201 and written, and
// the original request's retry then 422.
func TestKBIdempotencyKeyOfAnUnchangedDocumentAfterARestart(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	first, stop := nodetest.StartWithStop(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}, DataDir: t.TempDir()})
	k := kbNode{n: first, log: lg}
	if code, b := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k1"); code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	code, unchanged := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2")
	if code != http.StatusOK || !strings.Contains(string(unchanged), `"status":"unchanged"`) {
		t.Fatalf("the stored document again under another key: %d %s; want 200 unchanged", code, unchanged)
	}
	code, again := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2")
	if code != http.StatusOK || string(again) != string(unchanged) {
		t.Errorf("the same request again: %d %s; want 200 %s", code, again, unchanged)
	}
	if got := k.kbMarks(t, "docs"); len(got) != 1 || got["http/k2"] != 1 {
		t.Errorf("marks %v; want one of http/k2", got)
	}
	stop()

	k = kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	code, b := k.postText(t, "docs", "limits.md", kbLimits, "Idempotency-Key", "k2")
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "Idempotency-Key reused with a different request") {
		t.Errorf("after a restart, the key of an unchanged write with another document: %d %s; want 422", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != 1 || got["install.md"] != 1 {
		t.Errorf("ingested %v; want install.md once", got)
	}
	code, b = k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2")
	if code != http.StatusOK || string(b) != string(unchanged) {
		t.Errorf("after a restart, the original request again: %d %s; want 200 %s", code, b, unchanged)
	}
	if got := k.kbMarks(t, "docs"); len(got) != 1 || got["http/k2"] != 1 {
		t.Errorf("marks %v; want one of http/k2", got)
	}
}

// TestKBIdempotencyKeyOnANodePinnedBeforeTheKeyMark: a node pinned to decision
// rules whose builds cannot fold a key's mark (12: the earlier of its builds
// refuse a kb.document_ingested of version 2) writes none, as before the mark.
func TestKBIdempotencyKeyOnANodePinnedBeforeTheKeyMark(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	k := kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}, DataDir: t.TempDir(), DecisionRules: 12}), log: lg}
	if code, b := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k1"); code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	if code, b := k.postText(t, "docs", "install.md", kbInstall, "Idempotency-Key", "k2"); code != http.StatusOK {
		t.Fatalf("the stored document again: %d %s; want 200", code, b)
	}
	if got := k.kbMarks(t, "docs"); len(got) != 0 {
		t.Errorf("marks %v on a node pinned to rules 12; want none", got)
	}
	events, err := lg.Read(context.Background(), knowledge.Stream("docs"), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Version > 1 {
			t.Errorf("seq %d: a %s of version %d; want 1 only", e.Seq, e.Type, e.Version)
		}
	}
}
