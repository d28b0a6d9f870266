package node_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// partitionRecorder stands between a node's consumer group and the node: it keeps
// the partitions the node was last assigned.
type partitionRecorder struct {
	n *node.Node

	mu    sync.Mutex
	owned map[int]bool
}

func (r *partitionRecorder) Assigned(partitions []int, total int) {
	r.mu.Lock()
	r.owned = map[int]bool{}
	for _, p := range partitions {
		r.owned[p] = true
	}
	r.mu.Unlock()
	r.n.Assigned(partitions, total)
}

func (r *partitionRecorder) Revoked() {
	r.mu.Lock()
	r.owned = nil
	r.mu.Unlock()
	r.n.Revoked()
}

func (r *partitionRecorder) owns(p int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned[p]
}

// memoryClusterNode is a sharded node with agent memory on Kafka, writing to the
// shared log through a counting log of its own.
type memoryClusterNode struct {
	memoryNode
	parts *partitionRecorder
	stop  func()
}

const memoryClusterPartitions = 6

// waitPartitionsSplit waits until nodes a and b both own partitions of the
// tasks topic, memoryClusterPartitions between them.
func waitPartitionsSplit(t *testing.T, a, b *node.Node) {
	t.Helper()
	waitFor(t, 60*time.Second, "both nodes own partitions", func() bool {
		pa, pb := a.PartitionsOwned(), b.PartitionsOwned()
		return pa > 0 && pb > 0 && pa+pb == memoryClusterPartitions
	})
}

func startMemoryClusterNode(t *testing.T, k kafkaEnv, group string, shared eventlog.Log, name string, tweak ...func(*node.Config)) memoryClusterNode {
	t.Helper()
	clients, err := kafka.DialNode(k.brokers, group, k.layout(memoryClusterPartitions), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	log := newCountingLog(shared)
	emb := &countingEmbedder{}
	cfg := node.Config{
		Log: log, NodeID: name, DataDir: t.TempDir(), Model: script(t, llm.ScriptStep{Content: "ok"}),
		Memory: &memory.Config{Embedder: emb},
		Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf},
	}
	for _, tw := range tweak {
		tw(&cfg)
	}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		_ = clients.Close()
		t.Fatal(err)
	}
	rec := &partitionRecorder{n: n}
	clients.SetOwner(rec)
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { stop(); _ = clients.Close() }) }
	t.Cleanup(closeAll)
	return memoryClusterNode{memoryNode: memoryNode{n: n, log: log, emb: emb}, parts: rec, stop: closeAll}
}

// namespaceOn returns a namespace whose stream's partition the node owns.
func namespaceOn(t *testing.T, owner memoryClusterNode, prefix string) string {
	t.Helper()
	for i := range 1000 {
		ns := fmt.Sprintf("%s%d", prefix, i)
		if owner.parts.owns(kafka.PartitionOf(memory.Stream(ns), memoryClusterPartitions)) {
			return ns
		}
	}
	t.Fatal("no namespace of 1,000 falls on the node's partitions")
	return ""
}

// A namespace is written by the owner of its partition, whichever node takes the
// request: a POST to node A for a namespace of node B's is written by B, and A's
// search is answered by B. When B stops, A takes its partitions: the memory is still
// found, a new write works, nothing is lost or written twice.
func TestMemoryClusterRoutesToTheNamespaceOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a")
	b := startMemoryClusterNode(t, k, group, shared, "b")
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")

	ids := a.mustPost(t, `[{"namespace":"`+ns+`","tier":"semantic","content":"Carol works at the Lisbon office","metadata":{"via":"a"}},
		{"namespace":"`+ns+`","tier":"episodic","content":"Carol presented the roadmap on Monday"}]`, "Idempotency-Key", "cluster-1")
	if len(ids) != 2 {
		t.Fatalf("ids %v", ids)
	}
	if got := a.log.memoryAppends(); got != 0 {
		t.Errorf("node a appended %d times to a namespace of node b's", got)
	}
	if got := b.log.memoryAppends(); got != 1 {
		t.Errorf("node b appended %d times for one request; want 1", got)
	}
	// The same request again, through the other node: written once.
	again := b.mustPost(t, `[{"namespace":"`+ns+`","tier":"semantic","content":"Carol works at the Lisbon office","metadata":{"via":"a"}},
		{"namespace":"`+ns+`","tier":"episodic","content":"Carol presented the roadmap on Monday"}]`, "Idempotency-Key", "cluster-1")
	if fmt.Sprint(again) != fmt.Sprint(ids) {
		t.Errorf("the request sent again answered %v; want %v", again, ids)
	}

	// The key used again for another request: refused by the owner, 422 on A.
	if code, _, msg := a.post(t, `{"namespace":"`+ns+`","tier":"semantic","content":"Carol likes jazz"}`, "Idempotency-Key", "cluster-1"); code != http.StatusUnprocessableEntity || msg == "" {
		t.Errorf("a key used again for another request, on node a: %d %q", code, msg)
	}

	// The key used again, on the other node, for the same content with other
	// metadata: node b never saw the key, the namespace's events tell the
	// owner it named another request.
	a.mustPost(t, `{"namespace":"`+ns+`","tier":"semantic","content":"Carol likes fado","metadata":{"via":"a"}}`, "Idempotency-Key", "cluster-2")
	if code, ids, msg := b.post(t, `{"namespace":"`+ns+`","tier":"semantic","content":"Carol likes fado","metadata":{"via":"b"}}`, "Idempotency-Key", "cluster-2"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "different request") {
		t.Errorf("a key used again for other metadata, on node b: %d %v %q; want 422", code, ids, msg)
	}

	// A's search and history are answered by B.
	embedded := a.emb.calls.Load()
	code, ans := a.search(t, url.Values{"namespace": {ns}, "q": {"Lisbon office"}})
	if code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].ID != ids[0] || string(ans.Results[0].Metadata) != `{"via":"a"}` {
		t.Fatalf("search on node a: %d %+v", code, ans)
	}
	if got := a.emb.calls.Load() - embedded; got != 0 {
		t.Errorf("node a embedded the query itself (%d calls); its owner answers", got)
	}
	if code, h := a.history(t, ids[1], ns); code != http.StatusOK || len(h.History) != 1 || h.History[0].Type != messages.TypeMemoryAdded {
		t.Errorf("history on node a: %d %+v", code, h)
	}
	if code, h := a.history(t, "m_unknown", ns); code != http.StatusNotFound {
		t.Errorf("history of an unknown id on node a: %d %+v", code, h)
	}
	if code, _, msg := a.post(t, `{"namespace":"`+ns+`","tier":"semantic","content":" "}`); code != http.StatusBadRequest || msg == "" {
		t.Errorf("bad input on node a: %d %q", code, msg)
	}
	// Found bad by the owner (content past its MaxContentBytes): still a 400.
	long := strings.Repeat("far too long ", 2000)
	if code, _, msg := a.post(t, `{"namespace":"`+ns+`","tier":"semantic","content":"`+long+`"}`); code != http.StatusBadRequest || !strings.Contains(msg, "content") {
		t.Errorf("content past the owner's limit, on node a: %d %q", code, msg)
	}
	if got := b.log.memoryAppends(); got != 2 {
		t.Errorf("node b appended %d times after refusals; want 2", got)
	}

	// B stops while a write for its namespace is on its way; A takes every partition,
	// and the write is made once, by whichever node reads it.
	type answer struct {
		code int
		body string
	}
	during := make(chan answer, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/memories", strings.NewReader(`{"namespace":"`+ns+`","tier":"working","content":"Carol is on a call until noon"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "during-stop")
		rec := httptest.NewRecorder()
		a.n.Handler().ServeHTTP(rec, req)
		during <- answer{rec.Code, rec.Body.String()}
	}()
	b.stop()
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool {
		return a.n.PartitionsOwned() == memoryClusterPartitions
	})
	select {
	case ans := <-during:
		if ans.code != http.StatusCreated {
			t.Fatalf("the write sent as node b stopped: %d %s", ans.code, ans.body)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the write sent as node b stopped was not answered within 45 s")
	}
	appendsBefore := a.log.memoryAppends()
	code, ans = a.search(t, url.Values{"namespace": {ns}, "q": {"Lisbon office"}})
	if code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].ID != ids[0] {
		t.Fatalf("search on node a after b stopped: %d %+v", code, ans)
	}
	more := a.mustPost(t, `{"namespace":"`+ns+`","tier":"semantic","content":"Carol moved to the Porto office"}`)
	if len(more) != 1 || more[0] == ids[0] || more[0] == ids[1] {
		t.Fatalf("a new write on node a: ids %v", more)
	}
	if got := a.log.memoryAppends() - appendsBefore; got != 1 {
		t.Errorf("node a appended %d times for one write after taking the namespace over; want 1", got)
	}
	// The same first request once more, now on its new owner: still written once.
	again = a.mustPost(t, `[{"namespace":"`+ns+`","tier":"semantic","content":"Carol works at the Lisbon office","metadata":{"via":"a"}},
		{"namespace":"`+ns+`","tier":"episodic","content":"Carol presented the roadmap on Monday"}]`, "Idempotency-Key", "cluster-1")
	if fmt.Sprint(again) != fmt.Sprint(ids) {
		t.Errorf("the first request sent to the new owner answered %v; want %v", again, ids)
	}

	events := memoryEvents(t, shared, ns)
	added := map[string]int{}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("the stream's seq %d at position %d", e.Seq, i+1)
		}
		if e.Type == messages.TypeMemoryAdded {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			added[p.(*messages.MemoryAdded).Memory.MemoryID]++
		}
	}
	if len(events) != 5 || len(added) != 5 {
		t.Errorf("the namespace's stream: %d events adding %v; want 5 memories, each added once", len(events), added)
	}
	_, ans = a.search(t, url.Values{"namespace": {ns}, "q": {"Carol"}, "limit": {"10"}})
	if len(ans.Results) != 5 {
		t.Errorf("a search of every memory on the last node found %d; want 5", len(ans.Results))
	}
}

// A batch larger than one bus message (1,000 memories of 1.2 KB) is written in full
// through a node that does not own the namespace, each memory once.
func TestMemoryClusterLargeBatch(t *testing.T) {
	k := newKafkaEnv(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, uniqueGroup(t), shared, "a")
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool {
		return a.n.PartitionsOwned() == memoryClusterPartitions
	})
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 45) // 1,215 bytes
	var body strings.Builder
	body.WriteByte('[')
	for i := range 1000 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"namespace":"team:docs","tier":"semantic","content":"note %d: %s"}`, i, filler)
	}
	body.WriteByte(']')
	ids := a.mustPost(t, body.String(), "Idempotency-Key", "big-1")
	if len(ids) != 1000 {
		t.Fatalf("%d ids for 1,000 memories", len(ids))
	}
	again := a.mustPost(t, body.String(), "Idempotency-Key", "big-1")
	if fmt.Sprint(again) != fmt.Sprint(ids) {
		t.Error("the batch sent again got other ids")
	}
	if got := len(memoryEvents(t, shared, "team:docs")); got != 1000 {
		t.Errorf("%d events for 1,000 memories", got)
	}

	// A search whose answer would be larger than a bus message answers with the best
	// results that fit, and the namespace's next commands are not held behind it.
	page := strings.Repeat("quarterly report figures ", 480) // 12,000 bytes
	body.Reset()
	body.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"namespace":"team:reports","tier":"semantic","content":"report %d %s"}`, i, page)
	}
	body.WriteByte(']')
	if ids := a.mustPost(t, body.String()); len(ids) != 100 {
		t.Fatalf("%d ids for 100 reports", len(ids))
	}
	code, ans := a.search(t, url.Values{"namespace": {"team:reports"}, "q": {"quarterly report"}, "limit": {"100"}})
	if code != http.StatusOK || len(ans.Results) == 0 || len(ans.Results) >= 100 {
		t.Fatalf("a search of 100 results of 12 KB: %d, %d results (%s)", code, len(ans.Results), ans.Error)
	}
	for i := 1; i < len(ans.Results); i++ {
		if ans.Results[i].Score > ans.Results[i-1].Score {
			t.Fatalf("result %d scores more than the one before it", i)
		}
	}
	t.Logf("a search for 100 results of 12 KB answered the best %d", len(ans.Results))
	if code, ans := a.search(t, url.Values{"namespace": {"team:reports"}, "q": {"report 7"}, "limit": {"1"}}); code != http.StatusOK || len(ans.Results) != 1 {
		t.Errorf("the next search: %d %+v", code, ans.Error)
	}
}

// memoryAgent adds a memory to the namespace its task names, searches for it, and
// answers.
type memoryAgent struct{}

func (memoryAgent) Name() string { return "memory-agent" }

func (memoryAgent) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	ns := ""
	for _, m := range r.Messages {
		if m.Role == messages.RoleUser {
			ns = m.Content
		}
	}
	msg := messages.ChatMessage{Role: messages.RoleAssistant}
	switch r.Step {
	case 1:
		msg.ToolCalls = []messages.ToolCall{memoryCall("c1", "add", `{"namespace":"`+ns+`","content":"The release ships on Thursday","importance":0.7}`)}
	case 2:
		msg.ToolCalls = []messages.ToolCall{memoryCall("c2", "search", `{"namespace":"`+ns+`","query":"release Thursday"}`)}
	case 3:
		msg.ToolCalls = []messages.ToolCall{memoryCall("c3", "add", `{"namespace":"`+ns+`","content":"Very important","importance":1.5}`)}
	default:
		msg.Content = "noted"
	}
	return llm.Response{Message: msg}, nil
}

// The memory tool of a session on node A, for a namespace of node B's: B performs the
// calls (add, then search), A writes nothing, and the task's results hold the memory.
func TestMemoryClusterToolCallsRunOnTheNamespaceOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	var allowed []string
	for i := range 100 {
		allowed = append(allowed, fmt.Sprintf("team:%d", i))
	}
	withTool := func(c *node.Config) {
		c.Model = memoryAgent{}
		c.MemoryTool = &memory.ToolConfig{Namespace: "agent:cluster", Namespaces: allowed}
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withTool)
	b := startMemoryClusterNode(t, k, group, shared, "b", withTool)
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "team:")
	session := ""
	for i := range 100 {
		if id := fmt.Sprintf("release-%d", i); a.parts.owns(kafka.PartitionOf(id, memoryClusterPartitions)) {
			session = id
			break
		}
	}
	if _, err := a.n.Submit(context.Background(), node.Task{Input: ns, SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, a.n, []string{session}, 30*time.Second)

	if got := a.log.memoryAppends(); got != 0 {
		t.Errorf("node a, which runs the session, appended %d times to node b's namespace", got)
	}
	if got := b.log.memoryAppends(); got != 1 {
		t.Errorf("node b appended %d times for one add; want 1", got)
	}
	events := memoryEvents(t, shared, ns)
	if len(events) != 1 || events[0].Type != messages.TypeMemoryAdded {
		t.Fatalf("the namespace's stream: %+v", events)
	}
	p, err := events[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	added := p.(*messages.MemoryAdded)
	if !strings.HasPrefix(added.Key, session+"/") {
		t.Errorf("the memory.added key %q; want the session's tool call key", added.Key)
	}
	sessionEvents, err := shared.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	results := answers(sessionEvents)
	if len(results) != 3 || !strings.Contains(results[0], added.Memory.MemoryID) || !strings.Contains(results[1], "release ships on Thursday") {
		t.Fatalf("the task's tool results: %q", results)
	}
	// Bad arguments, found by the owner, reach the model as such.
	if !strings.Contains(results[2], "invalid arguments") || !strings.Contains(results[2], "importance") {
		t.Errorf("an add with importance 1.5: %q; want the arguments' fault", results[2])
	}
}
