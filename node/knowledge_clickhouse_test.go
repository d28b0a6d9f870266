package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node on the ClickHouse log (TROUPE_TEST_CLICKHOUSE names the server) whose
// knowledge base is re-ingested over the HTTP API past the compaction's
// threshold (clickhouse.Config.CompactMin at knowledge's floor, 64): the
// stream is compacted, searches answer with the latest revisions, removed
// documents stay removed, and the base is listed with its documents; the node
// restarted on the same database and data directory folds the compacted
// stream to the same base, answers the same, and compacts on.
func TestKBCompactionOnClickHouseAcrossARestart(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	db := chtest.Database(t, addr, "troupe_kbnode_")
	dataDir := t.TempDir()
	const docs, gone = 20, 5
	start := func() (kbNode, func()) {
		t.Helper()
		lg, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db,
			FlushInterval: time.Millisecond, CompactMin: knowledge.CompactMin})
		if err != nil {
			t.Fatal(err)
		}
		n, stopNode := nodetest.StartWithStop(t, node.Config{Log: lg, DataDir: dataDir, Knowledge: &knowledge.Config{}})
		return kbNode{n: n, log: lg}, func() {
			stopNode()
			if err := lg.Close(); err != nil {
				t.Errorf("closing the log: %v", err)
			}
		}
	}
	doc := func(d, round int) string {
		return fmt.Sprintf("# Pier %d\n\n## Tides\n\nRevision %d: the tide table of pier %d names the word kelp%dr%d. %s", d, round, d, d, round,
			strings.Repeat(fmt.Sprintf("Boats of pier %d moor at berth %d. ", d, d+round), 8))
	}
	reingest := func(k kbNode, rounds []int) {
		t.Helper()
		for _, round := range rounds {
			for d := range docs {
				if code, b := k.postText(t, "harbour", fmt.Sprintf("piers/%02d.md", d), doc(d, round)); code != http.StatusCreated && code != http.StatusOK {
					t.Fatalf("round %d, document %d: %d %s", round, d, code, b)
				}
			}
		}
	}
	stored := func(k kbNode) int {
		t.Helper()
		es, err := k.log.Read(context.Background(), knowledge.Stream("harbour"), 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	// check asks what a user would of a base whose latest revision is round.
	check := func(what string, k kbNode, round int) {
		t.Helper()
		for _, d := range []int{0, 7, docs - 1} {
			_, ans, msg := k.search(t, "harbour", url.Values{"q": {fmt.Sprintf("kelp%dr%d", d, round)}, "mode": {"bm25"}, "limit": {"1"}})
			if want := fmt.Sprintf("piers/%02d.md", d); len(ans.Results) != 1 || ans.Results[0].Source != want {
				t.Fatalf("%s: a search for pier %d's revision %d finds %v (%s); want %s", what, d, round, sources(ans), msg, want)
			}
			if _, old, _ := k.search(t, "harbour", url.Values{"q": {fmt.Sprintf("kelp%dr%d", d, round-1)}, "mode": {"bm25"}}); len(old.Results) != 0 &&
				strings.Contains(old.Results[0].Content, fmt.Sprintf("kelp%dr%d", d, round-1)) {
				t.Fatalf("%s: pier %d's revision %d is still found: %+v", what, d, round-1, old.Results[0])
			}
		}
		if _, ans, _ := k.search(t, "harbour", url.Values{"q": {"ferrytimetable"}, "mode": {"bm25"}}); len(ans.Results) != 0 {
			t.Fatalf("%s: a removed document is found: %v", what, sources(ans))
		}
		code, b := k.do(t, http.MethodGet, "/v1/kb", "", nil)
		var list struct{ Bases []knowledge.Stats }
		if code != http.StatusOK || json.Unmarshal(b, &list) != nil || len(list.Bases) != 1 || list.Bases[0].Name != "harbour" || list.Bases[0].Documents != docs {
			t.Fatalf("%s: GET /v1/kb: %d %s; want harbour with %d documents", what, code, b, docs)
		}
		n := stored(k)
		if max := docs + knowledge.CompactTail + knowledge.CompactMin + gone + 2; n > max {
			t.Fatalf("%s: the stream holds %d events for %d documents, want at most %d: it was not compacted", what, n, docs, max)
		}
		infos, err := k.log.Sessions(context.Background(), eventlog.Filter{Prefix: knowledge.Stream("harbour")})
		if err != nil || len(infos) != 1 || infos[0].Events != n {
			t.Fatalf("%s: the log's summary of the stream: %+v, %v; want %d events", what, infos, err, n)
		}
		t.Logf("%s: %d events stored", what, n)
	}

	k, stop := start()
	for d := range gone {
		src := fmt.Sprintf("ferries/%d.md", d)
		if code, b := k.postText(t, "harbour", src, "# Ferry\n\nThe ferrytimetable of the old quay."); code != http.StatusCreated {
			t.Fatalf("%s: %d %s", src, code, b)
		}
		if code, b := k.do(t, http.MethodDelete, "/v1/kb/harbour/documents/"+src, "", nil); code != http.StatusOK {
			t.Fatalf("DELETE %s: %d %s", src, code, b)
		}
	}
	reingest(k, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	check("after 10 rounds", k, 9)
	stop()

	k, stop = start()
	defer stop()
	check("restarted", k, 9)
	reingest(k, []int{10, 11, 12, 13, 14})
	check("restarted, after 5 more rounds", k, 14)
}
