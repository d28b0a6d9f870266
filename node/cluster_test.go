package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// ledger stands for an external service with side effects that honours idempotency
// keys: it performs an effect once per key however often it is called. It also
// checks the invariant "recovery never repeats a recorded effect": a call whose key
// already has a tool.completed in the log is a violation.
type ledger struct {
	log   eventlog.Log
	delay time.Duration

	mu         sync.Mutex
	calls      map[string]int
	effects    map[string]int
	by         map[string]string // key -> node that performed the effect
	violations []string
	trace      []string
}

func newLedger(log eventlog.Log, delay time.Duration) *ledger {
	return &ledger{log: log, delay: delay, calls: map[string]int{}, effects: map[string]int{}, by: map[string]string{}}
}

// tool returns the ledger as a tool of the named node.
func (l *ledger) tool(nodeName string) tools.Tool { return ledgerTool{l, nodeName} }

type ledgerTool struct {
	l    *ledger
	node string
}

func (t ledgerTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "ledger", Description: "records a payment once per idempotency key"}
}

func (t ledgerTool) Call(ctx context.Context, c tools.Call) (string, error) {
	l := t.l
	if recorded(l.log, c.Key, messages.TypeToolCallCompleted) {
		l.mu.Lock()
		l.violations = append(l.violations, "tool call repeated after its result was recorded: "+c.Key)
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.calls[c.Key]++
	l.trace = append(l.trace, fmt.Sprintf("%s %s %s", time.Now().Format("05.000"), t.node, c.Key))
	if l.effects[c.Key] == 0 {
		l.effects[c.Key] = 1
		l.by[c.Key] = t.node
	}
	l.mu.Unlock()
	select {
	case <-time.After(l.delay):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "paid " + c.Arguments, nil
}

// recorded reports whether the log holds an event of type typ for effect key.
func recorded(log eventlog.Log, key string, typ messages.Type) bool {
	session := key[:strings.LastIndex(key, "/")]
	events, err := log.Read(context.Background(), session, 1)
	if err != nil {
		return false
	}
	for _, e := range events {
		if e.Type == typ && strings.Contains(string(e.Payload), `"key":"`+key+`"`) {
			return true
		}
	}
	return false
}

// checkedModel answers step 1 with a ledger call and step 2 with the answer, counts
// its calls by node, and reports a call whose response is already in the log.
type checkedModel struct {
	*llm.Scripted
	log  eventlog.Log
	node string

	mu         *sync.Mutex
	callsBy    map[string]int
	violations *[]string
}

func (m checkedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.check(r)
	return m.Scripted.Generate(ctx, r)
}

// Stream is Generate's, streamed: a node streams the calls of the sessions it runs.
func (m checkedModel) Stream(ctx context.Context, r llm.Request, onDelta func(llm.Delta) error) (llm.Response, error) {
	m.check(r)
	return m.Scripted.Stream(ctx, r, onDelta)
}

func (m checkedModel) check(r llm.Request) {
	violated := recorded(m.log, r.Key, messages.TypeModelResponded)
	m.mu.Lock()
	m.callsBy[m.node]++
	if violated {
		*m.violations = append(*m.violations, "model call repeated after its response was recorded: "+r.Key)
	}
	m.mu.Unlock()
}

type modelCalls struct {
	mu         sync.Mutex
	by         map[string]int
	violations []string
}

func (c *modelCalls) model(t *testing.T, log eventlog.Log, nodeName string) llm.Model {
	s, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "ledger", Arguments: `{"amount":7}`}}},
		{Content: "paid"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return checkedModel{Scripted: s, log: log, node: nodeName, mu: &c.mu, callsBy: c.by, violations: &c.violations}
}

// testCluster is one test's cluster: its topics and consumer group, the shared log,
// the ledger every node's tool writes to, and the model calls of every node.
type testCluster struct {
	t     *testing.T
	k     kafkaEnv
	group string
	log   eventlog.Log
	led   *ledger
	calls *modelCalls
}

func newTestCluster(t *testing.T, toolDelay time.Duration) *testCluster {
	t.Helper()
	log := sharedLog(t)
	return &testCluster{t: t, k: newKafkaEnv(t), group: uniqueGroup(t), log: log, led: newLedger(log, toolDelay), calls: &modelCalls{by: map[string]int{}}}
}

// node starts a cluster node named name with roles (0: all), the ledger as its tool.
func (c *testCluster) node(name string, roles node.Role) (*node.Node, func()) {
	c.t.Helper()
	return clusterNode(c.t, c.k, c.group, c.log, name, roles, []tools.Tool{c.led.tool(name)}, c.calls.model(c.t, c.log, name))
}

// clusterNode starts a sharded node on Kafka, on k's topics, in group, writing to the
// shared log; each of with changes its configuration first.
func clusterNode(t *testing.T, k kafkaEnv, group string, log eventlog.Log, name string, roles node.Role, tl []tools.Tool, model llm.Model, with ...func(*node.Config)) (*node.Node, func()) {
	t.Helper()
	clients, err := kafka.DialNode(k.brokers, group, k.layout(6), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		Log: log, NodeID: name, Roles: roles, Tools: tl, Model: model, MaxSteps: 4,
		Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf},
	}
	for _, w := range with {
		w(&cfg)
	}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		_ = clients.Close()
		t.Fatal(err)
	}
	clients.SetOwner(n)
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { stop(); _ = clients.Close() }) }
	t.Cleanup(closeAll)
	return n, closeAll
}

func sharedLog(t *testing.T) eventlog.Log {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitCompleted waits until every session finished, and fails on any that did not complete.
func waitCompleted(t *testing.T, n *node.Node, sessions []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range sessions {
		for {
			st, ok, err := n.Status(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if ok && st.Status != messages.StatusRunning {
				if st.Status != messages.StatusCompleted {
					t.Fatalf("session %s: %s (%s)", id, st.Status, st.Error)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s did not finish within %s (status %q, known %v)", id, within, st.Status, ok)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func uniqueGroup(t *testing.T) string {
	return "troupe-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000")
}

// TestClusterRoles runs the agents on one node and the tools and models on another:
// every effect of the sessions node goes over troupe.tool.requests and
// troupe.model.requests and comes back on troupe.replies.
func TestClusterRoles(t *testing.T) {
	c := newTestCluster(t, 0)
	log, led, calls := c.log, c.led, c.calls
	sessionsNode, _ := c.node("agents", node.RoleSessions)
	c.node("workers", node.RoleTools|node.RoleModels)

	sessions := submitTasks(t, sessionsNode, "roles", 8)
	waitCompleted(t, sessionsNode, sessions, 90*time.Second)

	led.mu.Lock()
	defer led.mu.Unlock()
	if len(led.effects) != len(sessions) {
		t.Fatalf("%d effects for %d sessions", len(led.effects), len(sessions))
	}
	for key, by := range led.by {
		if by != "workers" {
			t.Errorf("tool call %s ran on %s, want the tools node", key, by)
		}
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if calls.by["agents"] != 0 || calls.by["workers"] != 2*len(sessions) {
		t.Errorf("model calls by node = %v, want all %d on workers", calls.by, 2*len(sessions))
	}
	if v := append(led.violations, calls.violations...); len(v) > 0 {
		t.Errorf("recorded effects repeated: %v", v)
	}
	for _, id := range sessions {
		events, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(events[len(events)-1].Payload), "paid") {
			t.Errorf("session %s: last event %s", id, events[len(events)-1].Payload)
		}
	}
}

// TestClusterRebalance stops one of two nodes while their sessions wait on slow tool
// calls: the other node is assigned the partitions and finishes every session from the
// log, with each side effect once and no recorded effect repeated.
func TestClusterRebalance(t *testing.T) {
	c := newTestCluster(t, 400*time.Millisecond)
	log, led, calls := c.log, c.led, c.calls
	a, stopA := c.node("a", 0)
	bn, _ := c.node("b", 0)

	// Wait until both nodes own partitions, so that both run sessions.
	waitFor(t, 60*time.Second, "both nodes own partitions", func() bool {
		return a.PartitionsOwned() > 0 && bn.PartitionsOwned() > 0
	})
	sessions := submitTasks(t, bn, "rebalance", 24)
	waitFor(t, 60*time.Second, "tool calls on node a", func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		n := 0
		for _, by := range led.by {
			if by == "a" {
				n++
			}
		}
		return n > 0
	})
	stopA()
	waitCompleted(t, bn, sessions, 120*time.Second)

	led.mu.Lock()
	defer led.mu.Unlock()
	if len(led.effects) != len(sessions) {
		t.Errorf("%d distinct effects for %d sessions", len(led.effects), len(sessions))
	}
	onA := 0
	for _, by := range led.by {
		if by == "a" {
			onA++
		}
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if v := append(led.violations, calls.violations...); len(v) > 0 {
		t.Errorf("recorded effects repeated: %v", v)
	}
	for _, id := range sessions {
		events, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range events {
			if e.Seq != uint64(i+1) {
				t.Fatalf("session %s: seq %d at position %d", id, e.Seq, i+1)
			}
		}
	}
	t.Logf("%d sessions, %d tool effects performed on the stopped node, tool calls %d, model calls by node %v", len(sessions), onA, sum(led.calls), calls.by)
}

// submitTasks submits count "pay 7" tasks through n, to sessions named prefix-<time>-<i>.
func submitTasks(t *testing.T, n *node.Node, prefix string, count int) []string {
	t.Helper()
	base := fmt.Sprintf("%s-%d-", prefix, time.Now().UnixNano())
	sessions := make([]string, 0, count)
	for i := range count {
		id, err := n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: fmt.Sprintf("%s%d", base, i)})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, id)
	}
	return sessions
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterCancel cancels a running session through a node of the cluster: the
// cancellation travels on troupe.tasks to whichever node owns the session.
func TestClusterCancel(t *testing.T) {
	c := newTestCluster(t, 30*time.Second)
	led := c.led
	a, _ := c.node("a", 0)
	bn, _ := c.node("b", 0)
	waitFor(t, 60*time.Second, "both nodes own partitions", func() bool {
		return a.PartitionsOwned() > 0 && bn.PartitionsOwned() > 0
	})
	sessions := submitTasks(t, a, "cancel", 4)
	waitFor(t, 60*time.Second, "every session calling its tool", func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		return len(led.calls) == len(sessions)
	})
	for i, id := range sessions {
		via := []*node.Node{a, bn}[i%2]
		if err := via.Cancel(context.Background(), id, "the user changed their mind"); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	for _, id := range sessions {
		waitFor(t, 60*time.Second, "session "+id+" cancelled", func() bool {
			st, ok, err := a.Status(context.Background(), id)
			return err == nil && ok && st.Status == messages.StatusFailed && strings.Contains(st.Error, "changed their mind")
		})
		if err := bn.Cancel(context.Background(), id, "again"); !errors.Is(err, actors.ErrNoRunningTask) {
			t.Errorf("cancelling a finished session: err = %v, want ErrNoRunningTask", err)
		}
	}
}

// TestClusterMalformedEffectRequest sends a tools node a request it cannot read and a
// request for a tool it does not have, then a good one, on one partition: the first
// goes to the poison topic with its reason, the second is answered with a clear error
// (the asking session must not wait forever), and the partition keeps moving.
func TestClusterMalformedEffectRequest(t *testing.T) {
	c := newTestCluster(t, 0)
	k := c.k
	c.node("workers", node.RoleTools)

	layout := k.layout(6)
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: k.brokers, InitialOffset: kafka.FromLatest, Topics: layout}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	replies, err := sub.Subscribe(ctx, messages.TopicReplies)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: k.brokers, Topics: layout}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	session := fmt.Sprintf("bad-effect-%d", time.Now().UnixNano())
	request := func(body string) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(body))
		m.Metadata.Set(messages.MetaSessionID, session)
		return m
	}
	good := func(seq uint64, tool string) string {
		key := messages.EffectKey{SessionID: session, Seq: seq}.String()
		b, err := messages.EncodeCommand(&messages.EffectRequest{SessionID: session, Key: messages.EffectKey{SessionID: session, Seq: seq}, ReplyTopic: messages.TopicReplies, ReplyNode: "asker",
			Tool: &messages.ToolCallRequested{Key: key, CallID: "c", Tool: tool, Arguments: `{"amount":1}`}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := pub.Publish(messages.TopicToolRequests,
		request(`{"v":1,"session_id":"`+session+`","key":`),
		request(good(2, "no-such-tool")),
		request(good(3, "ledger")),
	); err != nil {
		t.Fatal(err)
	}
	answers := map[string]messages.EffectReply{}
	for len(answers) < 2 {
		select {
		case m := <-replies:
			m.Ack()
			rep, err := messages.DecodeEffectReply(m.Payload)
			if err != nil || rep.SessionID != session {
				continue
			}
			if m.Metadata.Get(messages.MetaReplyNode) != "asker" || m.Metadata.Get(messages.MetaCorrelationID) == "" {
				t.Errorf("reply metadata %v", m.Metadata)
			}
			answers[rep.Key.String()] = rep
		case <-ctx.Done():
			t.Fatalf("replies: got %v", answers)
		}
	}
	if rep := answers[session+"/2"]; !strings.Contains(rep.Error, "no such tool") {
		t.Errorf("request for a missing tool answered %+v", rep)
	}
	if rep := answers[session+"/3"]; rep.Error != "" || rep.Output != `paid {"amount":1}` {
		t.Errorf("good request answered %+v", rep)
	}
	reason := header(findRecord(t, k, node.TopicPoison, session), "reason_poisoned")
	if !strings.Contains(reason, "effect request") || !strings.Contains(reason, "corrupt") {
		t.Errorf("poison reason %q", reason)
	}
}

// TestClusterScaleOut adds two nodes while the first one is mid-run: the rebalance
// moves sessions to the new nodes, which finish them from the log, each side effect
// once and no recorded effect repeated.
func TestClusterScaleOut(t *testing.T) {
	cl := newTestCluster(t, 2*time.Second)
	led, calls := cl.led, cl.calls
	a, _ := cl.node("a", 0)
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	// 12: within the 16 concurrent calls of a tool on a node, so all are in flight at once.
	sessions := submitTasks(t, a, "scale", 12)
	waitFor(t, 60*time.Second, "tool calls under way", func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		return len(led.calls) >= 5
	})
	b, _ := cl.node("b", 0)
	c, _ := cl.node("c", 0)
	waitCompleted(t, a, sessions, 120*time.Second)
	waitFor(t, 60*time.Second, "every node owns partitions", func() bool {
		return a.PartitionsOwned() > 0 && b.PartitionsOwned() > 0 && c.PartitionsOwned() > 0
	})

	led.mu.Lock()
	defer led.mu.Unlock()
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if len(led.effects) != len(sessions) {
		t.Errorf("%d distinct effects for %d sessions", len(led.effects), len(sessions))
	}
	if v := append(led.violations, calls.violations...); len(v) > 0 {
		t.Errorf("recorded effects repeated: %v", v)
	}
	if calls.by["b"]+calls.by["c"] == 0 {
		t.Error("no session moved to the new nodes")
	}
	// The tool takes 2 s, within the 5 s handoff grace: calls in flight at the
	// rebalance finish and are recorded, so none is performed again.
	if n := sum(led.calls); n != len(sessions) {
		t.Errorf("%d tool calls for %d sessions: calls in flight at the rebalance were not handed over\n%s", n, len(sessions), strings.Join(led.trace, "\n"))
	}
	by := map[string]int{}
	for _, n := range led.by {
		by[n]++
	}
	t.Logf("%d sessions; side effects performed by node %v; tool calls %d; model calls by node %v", len(sessions), by, sum(led.calls), calls.by)
}
