package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

func script(t *testing.T, steps ...llm.ScriptStep) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memoryCall is a call of the memory tool.
func memoryCall(id, op, args string) messages.ToolCall {
	return messages.ToolCall{ID: id, Name: "memory", Arguments: `{"op":"` + op + `","args":` + args + `}`}
}

// The agent adds a memory and finds it in the next step of the same task: the event
// is in the namespace's stream, keyed by the tool call, and the search's tool result
// holds the memory.
func TestMemoryToolAddThenSearchInOneTask(t *testing.T) {
	var mu sync.Mutex
	written := map[string]int{}
	mn := newMemoryNode(t, node.Config{
		MemoryTool: &memory.ToolConfig{Namespace: "agent:planner"},
		MemoryWritten: func(ns string, count int) {
			mu.Lock()
			written[ns] += count
			mu.Unlock()
		},
		Model: script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c1", "add", `{"content":"The user's flight to Oslo leaves on Friday","importance":0.8}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c2", "search", `{"query":"flight Oslo"}`)}},
			llm.ScriptStep{Content: "Your flight leaves on Friday."},
		),
	})
	results := answers(nodetest.Run(t, mn.n, "trip-1", "when is my flight?"))
	if len(results) != 2 {
		t.Fatalf("tool results %q; want the add's and the search's", results)
	}
	var added struct {
		ID    string `json:"id"`
		Event string `json:"event"`
	}
	if err := json.Unmarshal([]byte(results[0]), &added); err != nil || added.ID == "" || added.Event != "ADD" {
		t.Fatalf("the add answered %q (%v)", results[0], err)
	}
	if !strings.Contains(results[1], added.ID) || !strings.Contains(results[1], "flight to Oslo leaves on Friday") {
		t.Errorf("the search answered %q; want memory %s", results[1], added.ID)
	}

	events := memoryEvents(t, mn.log, "agent:planner")
	if len(events) != 1 || events[0].Type != messages.TypeMemoryAdded {
		t.Fatalf("the namespace's stream: %+v; want one memory.added", events)
	}
	p, err := events[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if a := p.(*messages.MemoryAdded); !strings.HasPrefix(a.Key, "trip-1/") || a.Reason == "" {
		t.Errorf("the memory.added: key %q reason %q; want the tool call's key and a reason", a.Key, a.Reason)
	}
	// Searching over HTTP finds what the agent wrote.
	_, ans := mn.search(t, map[string][]string{"namespace": {"agent:planner"}, "q": {"Oslo"}})
	if len(ans.Results) != 1 || ans.Results[0].ID != added.ID {
		t.Errorf("GET /v1/memories/search: %+v", ans)
	}
	// The node hears of the agent's write, as of one over HTTP: the namespace's
	// consolidator counts it toward its threshold.
	mu.Lock()
	defer mu.Unlock()
	if written["agent:planner"] != 1 {
		t.Errorf("MemoryWritten heard %v; want 1 write to agent:planner", written)
	}
}

// stallingLog writes a memory namespace's events, then hangs until the caller gives
// up, as a node killed right after the write would: the write is in the log, its
// answer never reaches the session.
type stallingLog struct {
	eventlog.Log
	written chan struct{}
	once    sync.Once
}

func (l *stallingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if err := l.Log.Append(ctx, events); err != nil || len(events) == 0 || !memory.IsStream(events[0].SessionID) {
		return err
	}
	l.once.Do(func() { close(l.written) })
	<-ctx.Done()
	return ctx.Err()
}

// The agent's add is written to the log, and the node stops before the call's
// result is recorded. A node started on the same log resumes the task and issues the
// call again with the same key: the memory is written once, and the task's result
// names it.
func TestMemoryToolCallIssuedAgainAfterARestartWritesOnce(t *testing.T) {
	log := sharedLog(t)
	counted := newCountingLog(log)
	model := func() llm.Model {
		return script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c1", "add", `{"content":"The user booked seat 14C","tier":"episodic"}`)}},
			llm.ScriptStep{Content: "booked"},
		)
	}
	cfg := func(l eventlog.Log) node.Config {
		return node.Config{Log: l, Memory: &memory.Config{}, MemoryTool: &memory.ToolConfig{Namespace: "agent:booker"}, Model: model()}
	}

	stalling := &stallingLog{Log: counted, written: make(chan struct{})}
	firstCfg := cfg(stalling)
	firstCfg.HandoffGrace = heldCallGrace // the add's append stalls until the call is cut
	first, stopFirst := nodetest.StartWithStop(t, firstCfg)
	if _, err := first.Submit(context.Background(), node.Task{Input: "book a seat", SessionID: "booking-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalling.written:
	case <-time.After(10 * time.Second):
		t.Fatal("the memory was not written within 10 s")
	}
	stopFirst()
	atStop, err := log.Read(context.Background(), "booking-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := answers(atStop); len(got) != 0 {
		t.Fatalf("the stopped node recorded tool results %q; the test needs the add unanswered", got)
	}
	if got := len(memoryEvents(t, log, "agent:booker")); got != 1 {
		t.Fatalf("%d memory events at the stop; want 1", got)
	}
	appends := counted.memoryAppends()

	second := nodetest.Start(t, cfg(counted))
	waitCompleted(t, second, []string{"booking-1"}, 20*time.Second)

	events := memoryEvents(t, log, "agent:booker")
	if len(events) != 1 {
		t.Fatalf("the namespace's stream has %d events after the call was issued again; want 1: %+v", len(events), events)
	}
	if got := counted.memoryAppends(); got != appends {
		t.Errorf("the call issued again appended %d times", got-appends)
	}
	p, err := events[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	id := p.(*messages.MemoryAdded).Memory.MemoryID
	session, err := log.Read(context.Background(), "booking-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if results := answers(session); len(results) != 1 || !strings.Contains(results[0], id) {
		t.Errorf("the task's tool results %q; want one naming memory %s", results, id)
	}
}
