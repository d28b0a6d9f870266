package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// distilGate answers nothing until released: a model that takes minutes.
type distilGate struct {
	called, release chan struct{}
	once            sync.Once
}

func newDistilGate() *distilGate {
	return &distilGate{called: make(chan struct{}), release: make(chan struct{})}
}

func (m *distilGate) Name() string { return "gate" }

func (m *distilGate) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	m.once.Do(func() { close(m.called) })
	select {
	case <-m.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: "assistant", Content: "NONE"}}, nil
}

// A consolidation asked of a namespace's owner by another node (Node.Consolidate)
// asks the model, which may take minutes: the owner runs it beside its tasks
// handler, as its own scheduled runs go beside it, and answers once it is done.
// Meanwhile the commands that follow it on its partition of troupe.tasks (here the
// writes of another namespace there, more than a partition has in flight at once)
// are handled at once. Before, the run held its command unacknowledged in the
// handler: past kafka.NodeTasksInFlight messages behind it, its partition's tasks
// and commands all waited for the model.
func TestMemoryClusterConsolidateLetsItsPartitionGoOn(t *testing.T) {
	for _, actors := range []bool{false, true} {
		t.Run(fmt.Sprint("actors=", actors), func(t *testing.T) {
			consolidateBesideThePartition(t, actors)
		})
	}
}

func consolidateBesideThePartition(t *testing.T, actors bool) {
	gate := newDistilGate()
	var released sync.Once
	release := func() { released.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	tweak := func(owner bool) func(*node.Config) {
		return func(cfg *node.Config) {
			if owner {
				cfg.Model = gate
			}
			if actors {
				cfg.Consolidation = &consolidator.SchedulerConfig{Interval: -1, Threshold: -1}
			}
		}
	}
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a", tweak(false))
	b := startMemoryClusterNode(t, k, group, shared, "b", tweak(true))
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")
	part := kafka.PartitionOf(memory.Stream(ns), memoryClusterPartitions)
	other := ""
	for i := range 10000 {
		if cand := fmt.Sprintf("agent:beside%d", i); kafka.PartitionOf(memory.Stream(cand), memoryClusterPartitions) == part {
			other = cand
			break
		}
	}
	// Close episodes: the consolidator asks the model to distil them.
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)

	type result struct {
		rep consolidator.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		rep, err := a.n.Consolidate(ctx, ns, "cli/slow")
		done <- result{rep, err}
	}()
	select {
	case <-gate.called:
	case r := <-done:
		t.Fatalf("the consolidation ended without asking the model: %+v %v", r.rep, r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the owner's consolidation never asked the model")
	}
	// The model answers in 20 s at the latest: a write that waited for it
	// waited behind the consolidation.
	timer := time.AfterFunc(20*time.Second, release)
	defer timer.Stop()
	writes := kafka.NodeTasksInFlight + 16
	var slowest time.Duration
	for i := range writes {
		start := time.Now()
		code, _, msg := a.post(t, fmt.Sprintf(`{"namespace":%q,"tier":"semantic","content":"fact %d of the namespace beside"}`, other, i))
		if code != http.StatusCreated {
			t.Fatalf("write %d to %s: %d %s", i, other, code, msg)
		}
		slowest = max(slowest, time.Since(start))
		select {
		case <-gate.release:
			t.Fatalf("write %d of %d to %s, on the partition of %s (%d), waited for the consolidation's model (the slowest took %v)",
				i+1, writes, other, ns, part, slowest)
		default:
		}
	}
	t.Logf("%d writes beside the consolidation, the slowest in %v", writes, slowest)
	select {
	case r := <-done:
		t.Fatalf("the consolidation answered before its model did: %+v %v", r.rep, r.err)
	default:
	}
	release()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the consolidation: %v", r.err)
		}
		if r.rep.Namespace != ns {
			t.Errorf("the report: %+v", r.rep)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the consolidation never answered once its model did")
	}
}

// A consolidation under way on a namespace's owner that stops is cut off, and its
// command goes on to the namespace's next owner, which runs it under the same key
// and answers the caller, who still waits: as before, when the command, held
// unacknowledged by the owner's handler, reached the next owner by itself.
func TestMemoryClusterConsolidateCutOffGoesOnToTheNextOwner(t *testing.T) {
	gate := newDistilGate()
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(gate.release) }) })
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a")
	b := startMemoryClusterNode(t, k, group, shared, "b", func(cfg *node.Config) { cfg.Model = gate })
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)
	type result struct {
		rep consolidator.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		rep, err := a.n.Consolidate(ctx, ns, "cli/handover")
		done <- result{rep, err}
	}()
	select {
	case <-gate.called:
	case r := <-done:
		t.Fatalf("the consolidation ended without asking the model: %+v %v", r.rep, r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the owner's consolidation never asked the model")
	}
	b.stop()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the consolidation, its owner stopped mid-run: %v", r.err)
		}
		if r.rep.Namespace != ns {
			t.Errorf("the report: %+v", r.rep)
		}
	case <-time.After(110 * time.Second):
		t.Fatal("the consolidation was never answered once its owner stopped")
	}
}

// consolidatingAgent calls the memory tool's consolidate on the namespace its task
// names, then answers.
type consolidatingAgent struct{}

func (consolidatingAgent) Name() string { return "consolidating-agent" }

func (consolidatingAgent) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	ns := ""
	for _, m := range r.Messages {
		if m.Role == messages.RoleUser {
			ns = m.Content
		}
	}
	msg := messages.ChatMessage{Role: messages.RoleAssistant}
	if r.Step == 1 {
		msg.ToolCalls = []messages.ToolCall{memoryCall("c1", "consolidate", `{"namespace":"`+ns+`"}`)}
	} else {
		msg.Content = "consolidated"
	}
	return llm.Response{Message: msg}, nil
}

// The memory tool's consolidate, called by a session on node A for a namespace of
// node B's, runs on B beside its tasks handler too: the commands behind it on its
// partition go on while B's model distils. Before, it ran in B's handler, and the
// 64th write behind it waited for the model.
func TestMemoryClusterToolConsolidateLetsItsPartitionGoOn(t *testing.T) {
	gate := newDistilGate()
	var released sync.Once
	release := func() { released.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	var allowed []string
	for i := range 100 {
		allowed = append(allowed, fmt.Sprintf("team:%d", i))
	}
	withTool := func(model llm.Model) func(*node.Config) {
		return func(c *node.Config) {
			c.Model = model
			c.MemoryTool = &memory.ToolConfig{Namespace: "agent:cluster", Namespaces: allowed}
		}
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withTool(consolidatingAgent{}))
	b := startMemoryClusterNode(t, k, group, shared, "b", withTool(gate))
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "team:")
	part := kafka.PartitionOf(memory.Stream(ns), memoryClusterPartitions)
	other := ""
	for i := range 10000 {
		if cand := fmt.Sprintf("agent:beside%d", i); kafka.PartitionOf(memory.Stream(cand), memoryClusterPartitions) == part {
			other = cand
			break
		}
	}
	session := ""
	for i := range 100 {
		if id := fmt.Sprintf("tidy-%d", i); a.parts.owns(kafka.PartitionOf(id, memoryClusterPartitions)) {
			session = id
			break
		}
	}
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)
	if _, err := a.n.Submit(context.Background(), node.Task{Input: ns, SessionID: session}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.called:
	case <-time.After(60 * time.Second):
		t.Fatal("the owner's consolidation never asked the model")
	}
	// The model answers in 20 s at the latest: a write that waited for it
	// waited behind the consolidation.
	timer := time.AfterFunc(20*time.Second, release)
	defer timer.Stop()
	writes := kafka.NodeTasksInFlight + 16
	for i := range writes {
		code, _, msg := a.post(t, fmt.Sprintf(`{"namespace":%q,"tier":"semantic","content":"fact %d of the namespace beside"}`, other, i))
		if code != http.StatusCreated {
			t.Fatalf("write %d to %s: %d %s", i, other, code, msg)
		}
		select {
		case <-gate.release:
			t.Fatalf("write %d of %d to %s, on the partition of %s (%d), waited for the consolidation's model", i+1, writes, other, ns, part)
		default:
		}
	}
	release()
	waitCompleted(t, a.n, []string{session}, 60*time.Second)
	events, err := shared.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && strings.Contains(string(e.Payload), `"call_id":"c1"`) && strings.Contains(string(e.Payload), `"error"`) {
			t.Errorf("the consolidate call's result: %s", e.Payload)
		}
	}
}
