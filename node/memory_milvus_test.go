package node_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	mclient "github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// milvusAddr returns the address of the Milvus server of TROUPE_TEST_MILVUS, or
// skips the test (fails it under CI=true, where the server must be there).
func milvusAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TROUPE_TEST_MILVUS")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TROUPE_TEST_MILVUS is not set under CI: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait)")
		}
		t.Skip("TROUPE_TEST_MILVUS is not set: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait) and set TROUPE_TEST_MILVUS=127.0.0.1:19530")
	}
	return addr
}

// milvusPrefix returns a collection prefix of the test's own, whose collections
// are dropped when the test ends.
func milvusPrefix(t *testing.T, addr string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "troupe_nt_" + hex.EncodeToString(b) + "_"
	t.Cleanup(func() { dropMilvusPrefix(t, addr, prefix) })
	return prefix
}

func dropMilvusPrefix(t *testing.T, addr, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mclient.NewClient(ctx, mclient.Config{Address: addr})
	if err != nil {
		t.Errorf("drop %s*: connect: %v", prefix, err)
		return
	}
	defer c.Close()
	colls, err := c.ListCollections(ctx)
	if err != nil {
		t.Errorf("drop %s*: list: %v", prefix, err)
		return
	}
	for _, coll := range colls {
		if strings.HasPrefix(coll.Name, prefix) {
			if err := c.DropCollection(ctx, coll.Name); err != nil {
				t.Errorf("drop %s: %v", coll.Name, err)
			}
		}
	}
}

// cutProxy forwards TCP connections to a server until it is cut: then it closes
// every connection and refuses new ones (the server seems down), until restored.
// It can also forget its connections, as a NAT or a load balancer forgets idle
// ones: from then on the bytes sent on them vanish, with no RST and no FIN.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	dead   map[net.Conn]bool // forgotten
	cut    bool
	lost   atomic.Int64 // bytes sent on forgotten connections
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, dead: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		p.mu.Lock()
		dead := p.dead[from]
		p.mu.Unlock()
		if n > 0 && dead {
			p.lost.Add(int64(n))
		} else if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	from.Close()
	to.Close()
	p.mu.Lock()
	delete(p.conns, from)
	delete(p.conns, to)
	delete(p.dead, from)
	delete(p.dead, to)
	p.mu.Unlock()
}

// forget makes every open connection a black hole, as a NAT forgets idle ones,
// and returns how many it forgot. New connections are forwarded.
func (p *cutProxy) forget() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.dead[c] = true
	}
	return len(p.conns) / 2
}

// setCut cuts (closing every connection) or restores the proxy.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func newMilvusStore(t *testing.T, addr, prefix string) *milvus.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := milvus.New(ctx, milvus.Config{Addr: addr, Prefix: prefix, Consistency: milvus.Session})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// vectorSearch searches namespace ns by vector alone (the keyword index, kept in
// the node, cannot stand in for lost vectors) and returns the IDs found.
func (mn memoryNode) vectorSearch(t *testing.T, ns, q string) (int, []string, string) {
	t.Helper()
	code, ans := mn.search(t, url.Values{"namespace": {ns}, "q": {q}, "mode": {"vector"}, "limit": {"1"}})
	var ids []string
	for _, r := range ans.Results {
		ids = append(ids, r.ID)
	}
	return code, ids, ans.Error
}

// A Milvus that lost its data (started afresh, or its collections dropped) under a
// running node: the node makes the collections again and puts back the vectors
// of the memories it already had, which its events hold, and searches by vector
// find them all, old and new.
func TestMemoryOnMilvusStartedAfresh(t *testing.T) {
	addr := milvusAddr(t)
	prefix := milvusPrefix(t, addr)
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, addr, prefix)}})
	const ns = "user:afresh"
	old := mn.mustPost(t, `[{"namespace":"user:afresh","tier":"semantic","content":"Alice likes green tea"},
		{"namespace":"user:afresh","tier":"episodic","content":"Alice flew to Oslo on Friday"}]`)
	for i, q := range []string{"Alice likes green tea", "Alice flew to Oslo on Friday"} {
		if code, ids, msg := mn.vectorSearch(t, ns, q); code != http.StatusOK || !slices.Equal(ids, old[i:i+1]) {
			t.Fatalf("search %q before the loss: %d %v %s", q, code, ids, msg)
		}
	}

	dropMilvusPrefix(t, addr, prefix) // Milvus loses every collection

	added, msg := []string(nil), ""
	code := 0
	if code, added, msg = mn.post(t, `{"namespace":"user:afresh","tier":"semantic","content":"Bob likes black coffee"}`); code != http.StatusCreated {
		t.Fatalf("POST after Milvus lost its data: %d %s", code, msg)
	}
	for q, want := range map[string]string{"Alice likes green tea": old[0], "Alice flew to Oslo on Friday": old[1], "Bob likes black coffee": added[0]} {
		if code, ids, msg := mn.vectorSearch(t, ns, q); code != http.StatusOK || !slices.Equal(ids, []string{want}) {
			t.Errorf("search %q after Milvus lost its data: %d %v %s, want [%s]", q, code, ids, msg, want)
		}
	}
}

// runTask submits a task and waits for its end, with a deadline far beyond any
// request timeout: a task that hangs fails the test; one that ends is returned.
func runTaskPatiently(t *testing.T, n *node.Node, session, input string) []messages.Envelope {
	t.Helper()
	live, stop := n.Watch(session)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: session}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case e := <-live:
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				events, err := n.Log().Read(context.Background(), session, 1)
				if err != nil {
					t.Fatal(err)
				}
				return events
			}
		case <-deadline:
			t.Fatalf("session %s: the task did not end in 5 minutes", session)
		}
	}
}

// addedIDs returns the IDs of the memories added to namespace ns, by content.
func addedIDs(t *testing.T, mn memoryNode, ns string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, e := range memoryEvents(t, mn.log, ns) {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := p.(*messages.MemoryAdded); ok {
			out[a.Memory.Content] = append(out[a.Memory.Content], a.Memory.MemoryID)
		}
	}
	return out
}

// Milvus unreachable under a running node (a proxy between them cut): memories
// written over HTTP and by an agent's memory tool are stored in the log and
// answered as stored (201, their IDs), again and again, not only the first; a
// keyword search answers from the log; a hybrid search (the default, the memory
// tool's) answers too, with a note that says it ranked without the vector store and
// why; only a search by vector fails, 503, naming the vector store. Once Milvus is
// back, what was stored while it was down is found by vector search without being
// sent again, and a retry with the same Idempotency-Key returns the same ID and adds
// nothing.
func TestMemoryWhileMilvusIsDown(t *testing.T) {
	addr := milvusAddr(t)
	px := startCutProxy(t, addr)
	const ns = "agent:down"
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, px.Addr(), milvusPrefix(t, addr))},
		MemoryTool: &memory.ToolConfig{Namespace: ns},
		Model: script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c1", "add", `{"content":"The user's flight to Oslo leaves on Friday","importance":0.8}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c2", "search", `{"query":"flight Oslo"}`)}},
			llm.ScriptStep{Content: "Your flight leaves on Friday."},
		)})
	mn.mustPost(t, `{"namespace":"agent:down","tier":"semantic","content":"Alice likes green tea"}`)

	px.setCut(true)
	const during = `{"namespace":"agent:down","tier":"episodic","content":"Alice paid the hotel in Oslo on Monday"}`
	code, ids, msg := mn.post(t, during, "Idempotency-Key", "while-down")
	if code != http.StatusCreated || len(ids) != 1 {
		t.Fatalf("POST while Milvus is down: %d %v %q; want 201: the memory is stored in the log", code, ids, msg)
	}
	later := mn.mustPost(t, `{"namespace":"agent:down","tier":"semantic","content":"Bob likes black coffee"}`)
	stored := addedIDs(t, mn, ns)["Alice paid the hotel in Oslo on Monday"]
	if !slices.Equal(stored, ids) {
		t.Fatalf("the memory sent while Milvus is down is in the log as %v, want once, as %v", stored, ids)
	}
	code, ans := mn.search(t, url.Values{"namespace": {ns}, "q": {"hotel Oslo"}, "mode": {"keyword"}})
	if code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].ID != ids[0] || ans.Note != "" {
		t.Errorf("keyword search while Milvus is down: %d %+v %q %q; want %s, no note", code, ans.Results, ans.Note, ans.Error, ids[0])
	}
	code, ans = mn.search(t, url.Values{"namespace": {ns}, "q": {"black coffee"}})
	if code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].ID != later[0] || !strings.Contains(ans.Note, "without the vector store") {
		t.Errorf("hybrid search while Milvus is down: %d %+v %q %q; want %s and a note that the vector store was left out", code, ans.Results, ans.Note, ans.Error, later[0])
	}
	if code, found, msg := mn.vectorSearch(t, ns, "Bob likes black coffee"); code != http.StatusServiceUnavailable || len(found) != 0 || !strings.Contains(msg, "vector store") {
		t.Errorf("vector search while Milvus is down: %d %v %q; want 503 naming the vector store", code, found, msg)
	}
	events := runTaskPatiently(t, mn.n, "down-1", "when is my flight?")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	as := answers(events)
	if len(as) != 2 || !strings.Contains(as[0], `"id"`) || !strings.Contains(as[1], "flight to Oslo") || !strings.Contains(as[1], "without the vector store") {
		t.Errorf("memory tool answers while Milvus is down: %q; want the add stored and the search answered with a note", as)
	}

	px.setCut(false)
	// The first request after Milvus is back may fail while gRPC waits out its
	// reconnection backoff; a user tries again.
	var found []string
	for try := 1; ; try++ {
		code, found, msg = mn.vectorSearch(t, ns, "Alice paid the hotel in Oslo on Monday")
		if code == http.StatusOK || try == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if code != http.StatusOK || !slices.Equal(found, stored) {
		t.Errorf("vector search once Milvus is back: %d %v %s; want %v, stored while it was down", code, found, msg, stored)
	}
	if code, found, msg := mn.vectorSearch(t, ns, "The user's flight to Oslo leaves on Friday"); code != http.StatusOK || len(found) != 1 {
		t.Errorf("vector search for the agent's memory once Milvus is back: %d %v %s", code, found, msg)
	}
	if ids := mn.mustPost(t, during, "Idempotency-Key", "while-down"); !slices.Equal(ids, stored) {
		t.Errorf("the retry with the same key: %v, want %v", ids, stored)
	}
	added := addedIDs(t, mn, ns)
	if n := len(added["Alice paid the hotel in Oslo on Monday"]); n != 1 {
		t.Errorf("after the retry the memory is in the log %d times, want once", n)
	}
	if n := len(added["The user's flight to Oslo leaves on Friday"]); n != 1 {
		t.Errorf("the agent's memory is in the log %d times, want once", n)
	}
}

// A Milvus collection that refuses a namespace's vectors for good (one of another
// dimension under the node's name: another deployment's, or filled with another
// embedder) blocks neither the namespace's writes nor its other tiers: the memory
// is stored (201), a keyword search finds it, a vector search of another tier
// answers, and a vector search of that tier fails with a 503 that names the
// collection and the dimension (a search by vector of every tier fails so too).
func TestMemoryOnMilvusCollectionOfAnotherDimension(t *testing.T) {
	addr := milvusAddr(t)
	prefix := milvusPrefix(t, addr)
	other := newMilvusStore(t, addr, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := other.Upsert(ctx, "mem_semantic_text", []vectorstore.Item{{ID: "else/x", Vector: []float32{1, 0, 0, 0, 0, 0, 0, 0}}}); err != nil {
		t.Fatal(err)
	}
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, addr, prefix)}})
	const ns = "user:dim"
	code, sem, msg := mn.post(t, `{"namespace":"user:dim","tier":"semantic","content":"Dana likes rooibos"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST of a memory whose collection has another dimension: %d %q; want 201", code, msg)
	}
	epi := mn.mustPost(t, `{"namespace":"user:dim","tier":"episodic","content":"Dana sailed to Crete in June"}`)
	code, ans := mn.search(t, url.Values{"namespace": {ns}, "q": {"Dana sailed to Crete in June"}, "mode": {"vector"}, "tier": {"episodic"}})
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ID != epi[0] {
		t.Errorf("vector search of the episodic tier: %d %+v %s; want %v", code, ans.Results, ans.Error, epi)
	}
	code, ans = mn.search(t, url.Values{"namespace": {ns}, "q": {"rooibos"}, "mode": {"keyword"}})
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ID != sem[0] {
		t.Errorf("keyword search: %d %+v %s; want %v", code, ans.Results, ans.Error, sem)
	}
	code, ans = mn.search(t, url.Values{"namespace": {ns}, "q": {"Dana likes rooibos"}, "mode": {"vector"}, "tier": {"semantic"}})
	if code != http.StatusServiceUnavailable || !strings.Contains(ans.Error, "mem_semantic_text") || !strings.Contains(ans.Error, "dimension") {
		t.Errorf("vector search of the semantic tier: %d %q; want 503 naming the collection and the dimension", code, ans.Error)
	}
}

// A node idle long enough for the network to forget its connection to Milvus (a
// NAT or a load balancer drops idle flows without telling either end; the test
// makes that happen at once): the next search and write are answered, on a new
// connection, once the Store's check of the silent connection (a request waiting 2 s
// asks the server for its version, 1.5 s to answer) has closed the old one,
// instead of waiting for the request timeout or failing.
func TestMemoryAfterMilvusConnectionForgotten(t *testing.T) {
	addr := milvusAddr(t)
	px := startCutProxy(t, addr)
	const ns = "user:idle"
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, px.Addr(), milvusPrefix(t, addr))}})
	ids := mn.mustPost(t, `{"namespace":"user:idle","tier":"semantic","content":"Alice likes green tea"}`)
	if code, found, msg := mn.vectorSearch(t, ns, "Alice likes green tea"); code != http.StatusOK || !slices.Equal(found, ids) {
		t.Fatalf("search before: %d %v %s", code, found, msg)
	}
	if n := px.forget(); n == 0 {
		t.Fatal("no connection to forget")
	}
	start := time.Now()
	code, found, msg := mn.vectorSearch(t, ns, "Alice likes green tea")
	t.Logf("search on the forgotten connection: %d after %s (%d bytes vanished)", code, time.Since(start).Round(time.Millisecond), px.lost.Load())
	if code != http.StatusOK || !slices.Equal(found, ids) {
		t.Errorf("search after the connection was forgotten: %d %v %s, want %v", code, found, msg, ids)
	}
	more := mn.mustPost(t, `{"namespace":"user:idle","tier":"semantic","content":"Bob likes black coffee"}`)
	if code, found, msg := mn.vectorSearch(t, ns, "Bob likes black coffee"); code != http.StatusOK || !slices.Equal(found, more) {
		t.Errorf("search for the memory written after: %d %v %s, want %v", code, found, msg, more)
	}
}

// Hostile input through the HTTP API on Milvus: content at the size limit in
// four-byte characters, quotes, backslashes, control characters and line breaks in
// content (a NUL is refused there: TestMemoryBadInputIsRefusedAndWritesNothing), a NUL
// in metadata, and many namespaces named with every character a namespace may hold.
// Each namespace's search finds its own memory, byte for byte, and no other's.
func TestMemoryHostileInputOnMilvus(t *testing.T) {
	addr := milvusAddr(t)
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, addr, milvusPrefix(t, addr))}})
	huge := strings.Repeat("🦀", memory.DefaultMaxContentBytes/4-4) + " crab"
	hostile := []string{huge, `quote " and 'single' and \backslash\ and "]["`, "bell \x07 esc \x1b byte\nnew line\ttab \u2028 sep",
		`metadata["ns"] == "user:a" or true`, "ünïcödé 日本語"}
	const namespaces = 40
	var items []string
	contents := map[string]string{} // namespace -> content
	for i := range namespaces {
		ns := fmt.Sprintf("user:a.b_c-d@e:%02d", i)
		c := fmt.Sprintf("%s #%02d", hostile[i%len(hostile)], i)
		contents[ns] = c
		b, _ := json.Marshal(map[string]any{"namespace": ns, "tier": "semantic", "content": c,
			"metadata": map[string]string{`k"]`: `v\"`, "ns": "user:other", "nul\x00": "x"}})
		items = append(items, string(b))
	}
	ids := mn.mustPost(t, "["+strings.Join(items, ",")+"]")
	if len(ids) != namespaces {
		t.Fatalf("%d IDs for %d memories", len(ids), namespaces)
	}
	for i := range namespaces {
		ns := fmt.Sprintf("user:a.b_c-d@e:%02d", i)
		q := contents[ns]
		if len(q) > 8<<10 { // a query's limit: its last 16 bytes, from a character's start (a query must be UTF-8)
			from := len(q) - 16
			for !utf8.RuneStart(q[from]) {
				from++
			}
			q = q[from:]
		}
		code, ans := mn.search(t, url.Values{"namespace": {ns}, "q": {q}, "mode": {"vector"}, "limit": {"5"}})
		if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ID != ids[i] || ans.Results[0].Content != contents[ns] {
			t.Errorf("search in %s: %d %+v %s; want only %s with its content", ns, code, ans.Results, ans.Error, ids[i])
		}
	}
}
