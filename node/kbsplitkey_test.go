package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// cutLog is the SQLite log storing only the first event of an append of a
// document split in parts, then failing: a log (a ClickHouse INSERT) that broke
// amid the write, or a node that stopped there.
type cutLog struct{ *sqlite.Log }

func (l cutLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 1 && events[0].Type == messages.TypeKBDocumentIngested {
		if err := l.Log.Append(ctx, events[:1]); err != nil {
			return err
		}
		return errors.New("eventlog: connection lost amid the append")
	}
	return l.Log.Append(ctx, events)
}

// splitGuide is a Markdown document of n paragraphs, some 130 KB of chunk JSON
// for n = 600: over an event bound of 32 KiB, it is stored in parts.
func splitGuide(n int) string {
	var sb strings.Builder
	sb.WriteString("# Guide\n\n")
	for i := range n {
		fmt.Fprintf(&sb, "Paragraph %d says that item%d holds for the node.\n\n", i, i)
	}
	return sb.String()
}

// A document stored in parts under an Idempotency-Key, of which only the first
// part was stored (the log failed amid the append, and the node was restarted),
// is written whole when the request is sent again with the key: the retry is
// answered with the document's every chunk, the base holds them all and a search
// finds the last paragraph. Before, the retry was answered with the result
// recorded by the first part, 201, and the document stayed without the chunks of
// its other parts for good (the same bytes under the key were never written
// again).
func TestKBKeyedSplitDocumentStoredInPartIsCompletedByItsRetry(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	cfg := func() *knowledge.Config { return &knowledge.Config{MaxEventBytes: 32 << 10} }
	body := splitGuide(600)

	first, stop := nodetest.StartWithStop(t, node.Config{Log: cutLog{lg}, Knowledge: cfg(), DataDir: t.TempDir()})
	k := kbNode{n: first, log: lg}
	// The whole document's chunk count, from a base of its own.
	code, b := k.postText(t, "ref", "big.md", body)
	if code != http.StatusCreated && code != http.StatusServiceUnavailable {
		t.Fatalf("setup: %d %s", code, b)
	}
	if code, b := k.postText(t, "docs", "big.md", body, "Idempotency-Key", "big-1"); code != http.StatusServiceUnavailable {
		t.Fatalf("the write cut by the log: %d %s; want 503", code, b)
	}
	stop()

	k = kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: cfg()}), log: lg}
	want := writeWhole(t, k, "ref", body)
	if got := kbChunks(t, k, "docs", "big.md"); got == 0 || got >= want {
		t.Fatalf("before the retry big.md has %d chunks; want some of its %d (its first part)", got, want)
	}
	code, b = k.postText(t, "docs", "big.md", body, "Idempotency-Key", "big-1")
	var res knowledge.AddResult
	if code != http.StatusCreated || json.Unmarshal(b, &res) != nil || res.Chunks != want || res.Status != knowledge.StatusAdded {
		t.Fatalf("the retry: %d %s; want 201, added, %d chunks", code, b, want)
	}
	if got := kbChunks(t, k, "docs", "big.md"); got != want {
		t.Fatalf("after the retry big.md has %d chunks; want %d", got, want)
	}
	_, ans, _ := k.search(t, "docs", url.Values{"q": {"item599"}, "mode": {"bm25"}, "limit": {"1"}})
	if len(ans.Results) != 1 || !strings.Contains(ans.Results[0].Content, "item599") {
		t.Fatalf("a search for the last paragraph finds %+v", ans.Results)
	}
	// Whole now: the key sent again answers the same, writing nothing.
	n := len(kbEvents(t, k, "docs"))
	code, again := k.postText(t, "docs", "big.md", body, "Idempotency-Key", "big-1")
	if code != http.StatusCreated || string(again) != string(b) {
		t.Fatalf("the key once more: %d %s; want 201 %s", code, again, b)
	}
	if got := len(kbEvents(t, k, "docs")); got != n {
		t.Fatalf("the key once more wrote %d events", got-n)
	}
}

// writeWhole ingests body as big.md into base (a retry without a key, after a
// cut write) and returns its chunk count.
func writeWhole(t *testing.T, k kbNode, base, body string) int {
	t.Helper()
	if code, b := k.postText(t, base, "big.md", body); code >= 300 {
		t.Fatalf("%s: %d %s", base, code, b)
	}
	return kbChunks(t, k, base, "big.md")
}

// kbChunks returns the chunks of source that GET /v1/kb/{base}/documents lists.
func kbChunks(t *testing.T, k kbNode, base, source string) int {
	t.Helper()
	code, b := k.do(t, http.MethodGet, "/v1/kb/"+base+"/documents", "", nil)
	var ans struct{ Documents []knowledge.Document }
	if code != http.StatusOK || json.Unmarshal(b, &ans) != nil {
		t.Fatalf("documents of %s: %d %s", base, code, b)
	}
	for _, d := range ans.Documents {
		if d.Source == source {
			return d.Chunks
		}
	}
	return 0
}

func kbEvents(t *testing.T, k kbNode, base string) []messages.Envelope {
	t.Helper()
	es, err := k.log.Read(context.Background(), knowledge.Stream(base), 1)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// A removal sent under the Idempotency-Key of an upload stored in some of its
// parts (the log failed amid the append, the node was restarted, so it no
// longer remembers the key's request) is another request: 422, nothing
// written, and the upload's retry under the key still writes the document
// whole. Before, the base found the key not done and removed the document
// under it, and the upload's retry was then refused as another request.
func TestKBRemovalUnderTheKeyOfASplitDocumentStoredInPartIsRefused(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	cfg := func() *knowledge.Config { return &knowledge.Config{MaxEventBytes: 32 << 10} }
	body := splitGuide(600)
	first, stop := nodetest.StartWithStop(t, node.Config{Log: cutLog{lg}, Knowledge: cfg(), DataDir: t.TempDir()})
	k := kbNode{n: first, log: lg}
	if code, b := k.postText(t, "docs", "big.md", body, "Idempotency-Key", "big-1"); code != http.StatusServiceUnavailable {
		t.Fatalf("the write cut by the log: %d %s; want 503", code, b)
	}
	stop()

	k = kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: cfg()}), log: lg}
	n := len(kbEvents(t, k, "docs"))
	code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/big.md", "", nil, "Idempotency-Key", "big-1")
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "Idempotency-Key reused with a different request") {
		t.Fatalf("a removal under the upload's key: %d %s; want 422", code, b)
	}
	if got := len(kbEvents(t, k, "docs")); got != n {
		t.Fatalf("the refused removal wrote %d events", got-n)
	}
	want := writeWhole(t, k, "ref", body)
	code, b = k.postText(t, "docs", "big.md", body, "Idempotency-Key", "big-1")
	if code != http.StatusCreated || kbChunks(t, k, "docs", "big.md") != want {
		t.Fatalf("the upload's retry: %d %s, %d chunks stored; want 201, %d", code, b, kbChunks(t, k, "docs", "big.md"), want)
	}
}
