package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
)

// soloNode is a node without Kafka on the ClickHouse log of db, with its own
// connection and data directory, as `node serve --clickhouse` runs it.
type soloNode struct {
	kbNode
	stop func()
}

func startSoloNode(t *testing.T, addr, db, id, dataDir string) soloNode {
	t.Helper()
	lg, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{Log: lg, DataDir: dataDir, NodeID: id, Knowledge: &knowledge.Config{}})
	if err != nil {
		_ = lg.Close()
		t.Fatal(err)
	}
	stopNode, err := n.Start(context.Background())
	if err != nil {
		_ = lg.Close()
		t.Fatal(err)
	}
	var once sync.Once
	s := soloNode{kbNode: kbNode{n: n, log: lg}, stop: func() {
		once.Do(func() {
			stopNode()
			_ = lg.Close()
		})
	}}
	t.Cleanup(s.stop)
	return s
}

// submit posts a task of session over the HTTP API.
func (s soloNode) submit(t *testing.T, session, input string) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"input": input, "session_id": session})
	return s.do(t, http.MethodPost, "/v1/tasks", "application/json", strings.NewReader(string(b)))
}

// writes is what one writer sent through one node: the kb documents and the
// tasks acknowledged, and the answers to those refused.
type writes struct {
	docs, tasks []string
	refused     []string
}

// write sends n kb documents and n tasks of session through s, named after
// prefix, one after the other.
func (s soloNode) write(t *testing.T, prefix, session string, n int) writes {
	var w writes
	for i := range n {
		src := fmt.Sprintf("%s/doc%02d.md", prefix, i)
		code, b := s.postText(t, "shared", src, fmt.Sprintf("# %s\n\nThe word %s%d names this document.", src, strings.ReplaceAll(prefix, "/", ""), i))
		if code == http.StatusCreated || code == http.StatusOK {
			w.docs = append(w.docs, src)
		} else {
			w.refused = append(w.refused, fmt.Sprintf("POST %s: %d %s", src, code, b))
		}
		input := fmt.Sprintf("%s task %d: what is 2+%d?", prefix, i, i)
		code, b = s.submit(t, session, input)
		if code == http.StatusAccepted {
			w.tasks = append(w.tasks, input)
		} else {
			w.refused = append(w.refused, fmt.Sprintf("task %q: %d %s", input, code, b))
		}
	}
	return w
}

// Two nodes without Kafka on one ClickHouse database (two `node serve
// --clickhouse`, behind one load balancer), the second started after the first,
// both taking kb documents and tasks of one session: every write acknowledged
// is in the log exactly once. The second node took the log when it started, so
// the first refuses every write from then on with a clear error (503), and its
// /healthz says why; restarted, the first takes the log back, and the second
// refuses in turn. Before, both acknowledged every write, and the log lost some
// of them (the two wrote the same stream seqs, unfenced).
func TestTwoNodesWithoutKafkaOnOneClickHouseLog(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	db := chtest.Database(t, addr, "troupe_solo_")
	dirA, dirB := t.TempDir(), t.TempDir()
	const session = "shared-session"
	a := startSoloNode(t, addr, db, "node-a", dirA)
	before := a.write(t, "a0", session, 5)
	if len(before.refused) > 0 {
		t.Fatalf("the only node refused writes: %v", before.refused)
	}
	b := startSoloNode(t, addr, db, "node-b", dirB)
	// Both nodes take writes at once, as behind a load balancer.
	var wg sync.WaitGroup
	var got [2]writes
	for i, s := range []soloNode{a, b} {
		wg.Go(func() { got[i] = s.write(t, fmt.Sprintf("n%d", i), session, 12) })
	}
	wg.Wait()
	acked := writes{docs: append(slices.Clone(before.docs), append(got[0].docs, got[1].docs...)...),
		tasks: append(slices.Clone(before.tasks), append(got[0].tasks, got[1].tasks...)...)}

	// Every acknowledged write is in the log, once: read by a fresh connection.
	check := func(what string, acked writes) {
		t.Helper()
		fresh, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db})
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		inLog := kbNode{log: fresh}.ingested(t, "shared")
		for _, src := range acked.docs {
			if inLog[src] != 1 {
				t.Errorf("%s: document %s was acknowledged, and the log holds it %d times", what, src, inLog[src])
			}
		}
		events, err := fresh.Read(context.Background(), session, 1)
		if err != nil {
			t.Fatalf("%s: reading session %s: %v", what, session, err)
		}
		tasks := map[string]int{}
		for _, e := range events {
			if e.Type != messages.TypeTaskSubmitted {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			tasks[p.(*messages.TaskSubmitted).Input]++
		}
		for _, in := range acked.tasks {
			if tasks[in] != 1 {
				t.Errorf("%s: task %q was acknowledged, and session %s holds it %d times", what, in, session, tasks[in])
			}
		}
	}
	check("two nodes at once", acked)

	// The first node refused every write after the second started, saying why.
	if len(got[0].docs)+len(got[0].tasks) > 0 || len(got[0].refused) != 24 {
		t.Errorf("the first node, after the second took the log, acknowledged %d documents and %d tasks (want none)", len(got[0].docs), len(got[0].tasks))
	}
	for _, r := range got[0].refused {
		if !strings.Contains(r, ": 503 ") || !strings.Contains(r, "no longer owns the event log") || !strings.Contains(r, "node-b") {
			t.Errorf("the first node's refusal: %s; want a 503 that says another node (node-b) took the event log", r)
		}
	}
	if len(got[1].refused) > 0 {
		t.Errorf("the owner refused writes: %v", got[1].refused)
	}
	if code, body := a.do(t, http.MethodGet, "/healthz", "", nil); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "no longer owns the event log") {
		t.Errorf("the first node's /healthz: %d %s; want 503 saying another node took the log", code, body)
	}
	if code, body := b.do(t, http.MethodGet, "/healthz", "", nil); code != http.StatusOK {
		t.Errorf("the owner's /healthz: %d %s", code, body)
	}
	if code, body := a.do(t, http.MethodGet, "/livez", "", nil); code != http.StatusOK {
		t.Errorf("the first node's /livez: %d %s; want 200 (a restart would take the log back from the other)", code, body)
	}

	// The newest node owns the log: the first, restarted, takes it back.
	a.stop()
	a = startSoloNode(t, addr, db, "node-a", dirA)
	again := a.write(t, "a1", session, 3)
	if len(again.refused) > 0 {
		t.Fatalf("the restarted node refused writes: %v", again.refused)
	}
	late := b.write(t, "b1", session, 1)
	if len(late.docs)+len(late.tasks) > 0 || !strings.Contains(strings.Join(late.refused, "\n"), "no longer owns the event log") {
		t.Errorf("the second node, after the first took the log back: %+v; want its writes refused", late)
	}
	acked.docs, acked.tasks = append(acked.docs, again.docs...), append(acked.tasks, again.tasks...)
	check("after the restart", acked)
}

// A second node without Kafka started on the owner's ClickHouse log by mistake,
// whose New fails after it opened the log (here its data directory; as well a
// Milvus it cannot reach, or an MCP server that does not start), takes nothing:
// the first node still owns the log, takes writes and is healthy. Before, New
// took the log's next epoch right after opening it, and the node that never ran
// left the live one refusing every task and write (503) until it was restarted.
func TestFailedNewTakesNoLog(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	db := chtest.Database(t, addr, "troupe_solo_")
	a := startSoloNode(t, addr, db, "node-a", t.TempDir())
	if w := a.write(t, "a0", "s", 2); len(w.refused) > 0 {
		t.Fatalf("the only node refused writes: %v", w.refused)
	}

	lg, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	// Its data directory is a file: the knowledge base's vector index cannot be
	// opened in it, which New finds after it opened the log.
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{Log: lg, DataDir: file, NodeID: "node-b", Knowledge: &knowledge.Config{}})
	if err == nil {
		_ = n.Close()
		t.Fatal("New of a node whose data directory is a file succeeded")
	}
	t.Logf("the second node's New: %v", err)

	if w := a.write(t, "a1", "s", 2); len(w.refused) > 0 {
		t.Errorf("after a second node failed to start on its log, the first refused writes: %v", w.refused)
	}
	if code, body := a.do(t, http.MethodGet, "/healthz", "", nil); code != http.StatusOK {
		t.Errorf("after a second node failed to start on its log, the first's /healthz: %d %s", code, body)
	}

	// A node that starts, with every part that holds the log (memory, notes, the
	// knowledge base), takes it, once built: the first refuses from then on.
	lc, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c, stopC := nodetest.StartWithStop(t, node.Config{Log: lc, DataDir: t.TempDir(), NodeID: "node-c", Knowledge: &knowledge.Config{},
		Memory: &memory.Config{}, MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, Notes: &notes.Config{}})
	defer stopC()
	cn := soloNode{kbNode: kbNode{n: c, log: lc}}
	if w := cn.write(t, "c0", "s", 2); len(w.refused) > 0 {
		t.Errorf("the node started last refused writes: %v", w.refused)
	}
	if w := a.write(t, "a2", "s", 1); len(w.docs)+len(w.tasks) > 0 {
		t.Errorf("the first node, after a third took the log, acknowledged %+v", w)
	}
}
