package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// kbCountingLog counts the appends to knowledge bases' streams.
type kbCountingLog struct {
	eventlog.Log
	appends atomic.Int64
}

func (l *kbCountingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && knowledge.IsStream(events[0].SessionID) {
		l.appends.Add(1)
	}
	return l.Log.Append(ctx, events)
}

// A knowledge base's writes are made by the owner of its stream's partition,
// whichever node takes the request: an upload to node A for a base of node B's is
// appended by B, written once when sent again (through either node) with its key,
// refused with the owner's reason when bad; A's searches find it (A folds the
// shared log). A document too large for a bus message is ingested by the node that
// took it.
func TestKBClusterRoutesWritesToTheBaseOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	var logs [2]*kbCountingLog
	start := func(i int, name string) memoryClusterNode {
		return startMemoryClusterNode(t, k, group, shared, name, func(c *node.Config) {
			logs[i] = &kbCountingLog{Log: c.Log}
			c.Log, c.Knowledge = logs[i], &knowledge.Config{}
		})
	}
	a, b := start(0, "a"), start(1, "b")
	waitPartitionsSplit(t, a.n, b.n)
	base := ""
	for i := range 1000 {
		if name := fmt.Sprintf("kb%d", i); b.parts.owns(kafka.PartitionOf(knowledge.Stream(name), memoryClusterPartitions)) {
			base = name
			break
		}
	}
	if base == "" {
		t.Fatal("no knowledge base name of 1,000 falls on node b's partitions")
	}
	ka, kb := kbNode{n: a.n, log: shared}, kbNode{n: b.n, log: shared}

	code, body := ka.postText(t, base, "guide/install.md", kbInstall, "Idempotency-Key", "c1")
	if code != http.StatusCreated {
		t.Fatalf("upload on node a: %d %s", code, body)
	}
	if got := logs[0].appends.Load(); got != 0 {
		t.Errorf("node a appended %d times to a knowledge base of node b's", got)
	}
	if got := logs[1].appends.Load(); got != 1 {
		t.Errorf("node b appended %d times for one upload; want 1", got)
	}
	if code, again := kb.postText(t, base, "guide/install.md", kbInstall, "Idempotency-Key", "c1"); code >= 300 || !strings.Contains(string(again), `"source":"guide/install.md"`) {
		t.Errorf("the upload sent again through node b: %d %s", code, again)
	}
	for _, c := range []struct {
		what string
		do   func() (int, []byte)
		code int
		want string
	}{
		{"the key used again for another document", func() (int, []byte) {
			return ka.postText(t, base, "other.md", "# Other\n\ntext", "Idempotency-Key", "c1")
		}, http.StatusUnprocessableEntity, "Idempotency-Key"},
		{"a document without text", func() (int, []byte) { return ka.postText(t, base, "empty.md", " \n ") }, http.StatusBadRequest, "no text"},
		{"a corrupt PDF", func() (int, []byte) { return ka.upload(t, base, "broken.pdf", "%PDF-1.7 not really") }, http.StatusBadRequest, "malformed"},
	} {
		code, b := c.do()
		var e struct{ Error string }
		if code != c.code || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s, on node a: %d %s; want %d saying %q", c.what, code, b, c.code, c.want)
		}
	}
	if got := logs[1].appends.Load(); got != 1 {
		t.Errorf("node b appended %d times after the refusals; want 1", got)
	}
	if _, ans, _ := ka.search(t, base, url.Values{"q": {"brew install"}}); len(ans.Results) == 0 || ans.Results[0].Source != "guide/install.md" {
		t.Fatalf("search on node a: %+v", ans)
	}

	// Removed through node a, by node b.
	if code, body := ka.do(t, http.MethodDelete, "/v1/kb/"+base+"/documents/guide/install.md", "", nil); code != http.StatusOK {
		t.Fatalf("DELETE on node a: %d %s", code, body)
	}
	if got, gotA := logs[1].appends.Load(), logs[0].appends.Load(); got != 2 || gotA != 0 {
		t.Errorf("after the removal, node b appended %d times (want 2), node a %d (want 0)", got, gotA)
	}
	if _, ans, _ := kb.search(t, base, url.Values{"q": {"brew install"}}); len(ans.Results) != 0 {
		t.Fatalf("the removed document is found on node b: %+v", ans)
	}

	// Too large for one bus message: sent to the owner in parts.
	var big strings.Builder
	for i := 0; big.Len() < 1300<<10; i++ {
		fmt.Fprintf(&big, "## Part %d\n\nPart %d of the large manual says the pelican%d rests.\n\n", i, i, i)
	}
	if code, body := ka.postText(t, base, "manual.md", "# Manual\n\n"+big.String()); code != http.StatusCreated {
		t.Fatalf("large upload on node a: %d %.300s", code, body)
	}
	if got, gotB := logs[0].appends.Load(), logs[1].appends.Load(); got != 0 || gotB != 3 {
		t.Errorf("for a document too large for one bus message, node a appended %d times (want 0), node b %d (want 3)", got, gotB)
	}
	if code, again := ka.postText(t, base, "manual.md", "# Manual\n\n"+big.String()); code >= 300 || !strings.Contains(string(again), `"status":"unchanged"`) {
		t.Errorf("the large document sent again: %d %.300s", code, again)
	}
	if got := logs[1].appends.Load(); got != 3 {
		t.Errorf("node b appended %d times after the same large document came again; want 3", got)
	}
	if _, ans, _ := kb.search(t, base, url.Values{"q": {"pelican7"}, "mode": {"bm25"}, "limit": {"1"}}); len(ans.Results) != 1 || ans.Results[0].Source != "manual.md" {
		t.Fatalf("search on node b for the large document: %+v", ans)
	}
	if got := ka.ingested(t, base); got["guide/install.md"] != 1 || got["manual.md"] != 1 || len(got) != 2 {
		t.Fatalf("ingested %v", got)
	}
}

// A knowledge base's stream is compacted by the owner of its partition, which
// makes its writes, whichever node takes the uploads; the other node folds the
// compacted stream and finds every document.
func TestKBClusterCompactsOnTheBaseOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	start := func(name string) memoryClusterNode {
		return startMemoryClusterNode(t, k, group, shared, name, func(c *node.Config) {
			c.Log, c.Knowledge = shared, &knowledge.Config{} // the log itself: it can compact
		})
	}
	a, b := start("a"), start("b")
	waitPartitionsSplit(t, a.n, b.n)
	base := ""
	for i := range 1000 {
		if name := fmt.Sprintf("kb%d", i); b.parts.owns(kafka.PartitionOf(knowledge.Stream(name), memoryClusterPartitions)) {
			base = name
			break
		}
	}
	if base == "" {
		t.Fatal("no knowledge base name of 1,000 falls on node b's partitions")
	}
	ka := kbNode{n: a.n, log: shared}
	const docs, rounds = 70, 5
	for round := range rounds {
		for d := range docs {
			md := fmt.Sprintf("# Doc %d\n\nRevision %d of document %d, about the pelican%d.", d, round, d, d)
			if code, body := ka.postText(t, base, fmt.Sprintf("d%02d.md", d), md); code != http.StatusCreated {
				t.Fatalf("round %d, document %d, on node a: %d %s", round, d, code, body)
			}
		}
	}
	events, err := shared.Read(context.Background(), knowledge.Stream(base), 1)
	if err != nil {
		t.Fatal(err)
	}
	if bound := 2*docs + knowledge.CompactTail + knowledge.CompactMin + 2; len(events) > bound {
		t.Fatalf("after %d writes the stream holds %d events for %d documents (bound %d): not compacted", docs*rounds, len(events), docs, bound)
	}
	if _, ans, _ := ka.search(t, base, url.Values{"q": {"pelican42"}}); len(ans.Results) == 0 || ans.Results[0].Source != "d42.md" ||
		!strings.Contains(ans.Results[0].Content, fmt.Sprintf("Revision %d", rounds-1)) {
		t.Fatalf("search on node a after the compactions: %+v", ans)
	}
}
