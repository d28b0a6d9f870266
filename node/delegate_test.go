package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// byAgent answers each model call with the script of the agent it is for (its
// scope), so that a parent and its sub-agents, each at its own step 1, get their
// own answers. hold, when set, may return a channel a call waits on (or its context).
type byAgent struct {
	scripts map[string]llm.Model
	hold    func(agent string, step int) <-chan struct{}

	mu    sync.Mutex
	calls map[string]int
	first map[string]llm.Request // each agent's first request
	keyed map[modelCall]int      // the calls by agent, step and idempotency key
}

// modelCall is a model call byAgent was asked for: its agent, step and key.
type modelCall struct {
	agent string
	step  int
	key   string
}

func newByAgent(t *testing.T, scripts map[string][]llm.ScriptStep) *byAgent {
	t.Helper()
	m := &byAgent{scripts: map[string]llm.Model{}, calls: map[string]int{}, first: map[string]llm.Request{}, keyed: map[modelCall]int{}}
	for agent, steps := range scripts {
		m.scripts[agent] = script(t, steps...)
	}
	return m
}

func (m *byAgent) Name() string { return "scripted" }

func (m *byAgent) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	agent := r.Scope.Agent
	m.mu.Lock()
	m.calls[agent]++
	m.keyed[modelCall{agent, r.Step, r.Key}]++
	if _, ok := m.first[agent]; !ok {
		m.first[agent] = r
	}
	m.mu.Unlock()
	if m.hold != nil {
		if ch := m.hold(agent, r.Step); ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return llm.Response{}, ctx.Err()
			}
		}
	}
	m.mu.Lock()
	s, ok := m.scripts[agent]
	m.mu.Unlock()
	if !ok {
		return llm.Response{}, fmt.Errorf("no script for agent %q", agent)
	}
	return s.Generate(ctx, r)
}

// set replaces an agent's script.
func (m *byAgent) set(t *testing.T, agent string, steps ...llm.ScriptStep) {
	s := script(t, steps...)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scripts[agent] = s
}

func (m *byAgent) callsOf(agent string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[agent]
}

// performed returns how many times each call was asked for, by agent, step and key.
func (m *byAgent) performed() map[modelCall]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.keyed)
}

// delegateCall is a model step calling delegate.
func delegateCall(id, agent, task string) llm.ScriptStep {
	args, _ := json.Marshal(map[string]string{"agent": agent, "task": task})
	return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: id, Name: node.DelegateTool, Arguments: string(args)}}}
}

// lead delegates; helper computes with the calculator; flaky has no script (its
// model calls fail); brief stops after one step.
func subagentsConfig(model llm.Model) node.Config {
	return node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "lead", SystemPrompt: "You delegate.", Tools: []string{node.DelegateTool}},
		{Name: "helper", Description: "computes", SystemPrompt: "You compute.", Tools: []string{"calculator"}},
		{Name: "flaky", SystemPrompt: "You fail."},
		{Name: "brief", SystemPrompt: "You stop early.", Tools: []string{"calculator"}, MaxSteps: 1},
		{Name: "thrifty", SystemPrompt: "You spend little.", Tools: []string{"calculator"}, MaxTokens: 10},
	}}
}

var helperScript = []llm.ScriptStep{
	{ToolCalls: []messages.ToolCall{{ID: "h1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
	{Content: "42"},
}

// payloads decodes events of a type.
func payloads[P messages.Payload](t *testing.T, events []messages.Envelope) []P {
	t.Helper()
	var out []P
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := p.(P); ok {
			out = append(out, v)
		}
	}
	return out
}

// delegateKey returns the key of the session's delegate call.
func delegateKey(t *testing.T, events []messages.Envelope) messages.EffectKey {
	t.Helper()
	for _, r := range payloads[*messages.ToolCallRequested](t, events) {
		if r.Tool == node.DelegateTool {
			k, err := messages.ParseEffectKey(r.Key)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
	}
	t.Fatal("the session has no delegate call")
	return messages.EffectKey{}
}

// delegateResult returns the recorded result of the session's delegate call.
func delegateResult(t *testing.T, events []messages.Envelope) messages.ToolCallCompleted {
	t.Helper()
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		if c.Tool == node.DelegateTool {
			return *c
		}
	}
	t.Fatal("the session's delegate call has no result")
	return messages.ToolCallCompleted{}
}

func readAll(t *testing.T, l eventlog.Log, session string) []messages.Envelope {
	t.Helper()
	events, err := l.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// A parent delegates to a sub-agent: the child runs as a session of its own, whose
// task records its parent and the parent's deadline, with its agent's clean context
// (the task alone) and tools; its answer is the parent's tool result. The listing shows the child's
// parent, and both sessions verify as deterministic on their own.
func TestDelegateRunsAChildSession(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "the helper says 42"}},
		"helper": helperScript,
	})
	cfg := subagentsConfig(model)
	n := nodetest.Start(t, cfg)
	parent := runAgentTask(t, n, node.Task{Input: "Ask the helper for 6*7.", SessionID: "boss", Agent: "lead", DeadlineMS: 60_000})
	if last := parent[len(parent)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the parent ended with %s", last.Type)
	}
	res := delegateResult(t, parent)
	if res.Result != "42" || res.Error != "" {
		t.Fatalf("the delegate call's result: %+v, want 42", res)
	}
	key := delegateKey(t, parent)
	childID := node.ChildSessionID(key)
	if childID != "boss.sub4" {
		t.Errorf("child session %q, want boss.sub4", childID)
	}
	child := readAll(t, n.Log(), childID)
	tasks := payloads[*messages.TaskSubmitted](t, child)
	// The child's deadline is the parent's, which comes before DelegateTimeout.
	deadline := payloads[*messages.TaskSubmitted](t, parent)[0].DeadlineUS
	if len(tasks) != 1 || tasks[0].Agent != "helper" || tasks[0].Input != "What is 6*7?" || deadline == 0 || tasks[0].DeadlineUS != deadline ||
		tasks[0].Parent == nil || *tasks[0].Parent != (messages.ParentRef{SessionID: "boss", Key: key.String(), Depth: 1}) {
		t.Fatalf("the child's tasks: %+v", tasks)
	}
	model.mu.Lock()
	first := model.first["helper"]
	model.mu.Unlock()
	if len(first.Messages) != 2 || first.Messages[0].Content != "You compute." || first.Messages[1].Content != "What is 6*7?" ||
		len(first.Tools) != 1 || first.Tools[0].Name != "calculator" {
		t.Errorf("the child's first request: %+v; want its own prompt, the task alone and its tools", first)
	}
	if ended := payloads[*messages.TaskCompleted](t, child); len(ended) != 1 || ended[0].Output != "42" {
		t.Errorf("the child's end: %+v", ended)
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true}) // not the agents' configurations
	if err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	for _, i := range infos {
		parents[i.ID] = i.Parent
	}
	if len(parents) != 2 || parents["boss"] != "" || parents[childID] != "boss" {
		t.Errorf("sessions and their parents: %v", parents)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, events := range [][]messages.Envelope{parent, child} {
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %+v %v", events[0].SessionID, div, err)
		}
	}
}

// A child that fails (its model errs) or stops at its step limit is an error
// result of the delegate call, with the reason and the child's session; the parent
// goes on to its answer. An unknown agent is refused as bad arguments, with no child.
func TestDelegateFailuresAreErrorResults(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "flaky", "anything"), {Content: "carried on"}},
		// brief calls the calculator at its one step, and so has no answer in it.
		"brief": helperScript,
		// thrifty's first step alone spends more than its budget of 10 tokens.
		"thrifty": helperScript,
	})
	n := nodetest.Start(t, subagentsConfig(model))
	for _, c := range []struct {
		session, agent string
		want           []string
	}{
		{"with-flaky", "flaky", []string{"sub-agent flaky failed (" + messages.ReasonModelError + ")", "with-flaky.sub4", `no script for agent \"flaky\"`}},
		{"with-brief", "brief", []string{"sub-agent brief failed (" + messages.ReasonMaxSteps + ")", "with-brief.sub4", "stopped after 1 model calls"}},
		{"with-thrifty", "thrifty", []string{"sub-agent thrifty failed (" + messages.ReasonTokenBudget + ")", "with-thrifty.sub4", "its budget is 10"}},
		{"with-nobody", "nobody", []string{`"agent" must be one of "lead", "helper", "flaky", "brief", "thrifty", not "nobody"`}},
	} {
		model.set(t, "lead", delegateCall("d1", c.agent, "What is 6*7?"), llm.ScriptStep{Content: "carried on"})
		events := runAgentTask(t, n, node.Task{Input: "go", SessionID: c.session, Agent: "lead"})
		res := delegateResult(t, events)
		for _, w := range c.want {
			if !strings.Contains(res.Error, strings.ReplaceAll(w, `\"`, `"`)) {
				t.Errorf("%s: the delegate call's error %q lacks %q", c.session, res.Error, w)
			}
		}
		if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 || ended[0].Output != "carried on" {
			t.Errorf("%s: the parent did not go on: %+v", c.session, ended)
		}
	}
	if events := readAll(t, n.Log(), "with-nobody.sub4"); len(events) != 0 {
		t.Errorf("a delegate call to an unknown agent started a child: %d events", len(events))
	}
}

// Sub-agents nest at most node.MaxDelegationDepth deep: an agent that always
// delegates to itself gets an error result at that depth, and every level answers.
func TestDelegateDepthIsBounded(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "lead", "go deeper"), {Content: "done"}},
	})
	n := nodetest.Start(t, subagentsConfig(model))
	events := runAgentTask(t, n, node.Task{Input: "go deep", SessionID: "deep", Agent: "lead"})
	if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 {
		t.Fatalf("the root did not complete: %+v", events[len(events)-1])
	}
	id := "deep"
	for depth := 1; depth <= node.MaxDelegationDepth; depth++ {
		id += ".sub4"
		child := readAll(t, n.Log(), id)
		if len(child) == 0 {
			t.Fatalf("no child session %s at depth %d", id, depth)
		}
		if p := payloads[*messages.TaskSubmitted](t, child)[0].Parent; p == nil || p.Depth != depth {
			t.Errorf("%s: parent %+v, want depth %d", id, p, depth)
		}
		res := delegateResult(t, child)
		if depth == node.MaxDelegationDepth {
			if !strings.Contains(res.Error, fmt.Sprintf("nest at most %d deep", node.MaxDelegationDepth)) {
				t.Errorf("the delegate call at depth %d: %+v, want the depth error", depth, res)
			}
		} else if res.Result != "done" {
			t.Errorf("the delegate call at depth %d: %+v, want done", depth, res)
		}
	}
	if events := readAll(t, n.Log(), id+".sub4"); len(events) != 0 {
		t.Errorf("a child past the depth bound ran: %d events", len(events))
	}
}

// Cancelling the parent's task cancels its child's.
func TestDelegateCancelReachesTheChild(t *testing.T) {
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "unreachable"}},
		"helper": helperScript,
	})
	model.hold = func(agent string, _ int) <-chan struct{} {
		if agent == "helper" {
			return held
		}
		return nil
	}
	n := nodetest.Start(t, subagentsConfig(model))
	if _, err := n.Submit(context.Background(), node.Task{Input: "go", SessionID: "boss", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the child's model call", func() bool { return model.callsOf("helper") > 0 })
	if err := n.Cancel(context.Background(), "boss", "the user changed their mind"); err != nil {
		t.Fatal(err)
	}
	var ended []*messages.TaskFailed
	waitFor(t, 10*time.Second, "the child's task to end", func() bool {
		ended = payloads[*messages.TaskFailed](t, readAll(t, n.Log(), "boss.sub4"))
		return len(ended) > 0
	})
	if ended[0].Reason != messages.ReasonCancelled {
		t.Errorf("the child ended with %+v, want cancelled", ended[0])
	}
}

// A node killed while a child runs: the next node on the same log resumes both
// sessions; the parent's delegate call, performed again with the same key, waits
// for the same child instead of starting another, and the child's recorded
// effects are not performed again.
func TestDelegateSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	var tallies sync.Map // by key: how many times the tool was performed
	tally := tools.MustFunc("tally", "Counts.", func(ctx context.Context, _ struct{}) (string, error) {
		v, _ := tallies.LoadOrStore(tools.CallKey(ctx), new(int))
		*v.(*int)++
		return "counted", nil
	})
	helper := []llm.ScriptStep{{ToolCalls: []messages.ToolCall{{ID: "t1", Name: "tally", Arguments: `{}`}}}, {Content: "tallied"}}
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := newByAgent(t, map[string][]llm.ScriptStep{"lead": {delegateCall("d1", "helper", "tally once"), {Content: "done"}}, "helper": helper})
	first.hold = func(agent string, step int) <-chan struct{} {
		if agent == "helper" && step == 2 {
			return held // the child's answer never comes on the first node
		}
		return nil
	}
	config := func(model llm.Model) node.Config {
		cfg := subagentsConfig(model)
		cfg.DataDir, cfg.Tools = dir, []tools.Tool{tools.Calculator{}, tally}
		cfg.Agents[1].Tools = []string{"tally"}
		return cfg
	}
	cfg1 := config(first)
	cfg1.HandoffGrace = heldCallGrace // the child's second model call never answers on the first node
	_, stop1 := startWithTask(t, cfg1, node.Task{Input: "go", SessionID: "boss", Agent: "lead"})
	waitFor(t, 10*time.Second, "the child's second model call", func() bool { return first.callsOf("helper") >= 2 })
	stop1() // as a kill: nothing records the calls in flight

	second := newByAgent(t, map[string][]llm.ScriptStep{"lead": {delegateCall("d1", "helper", "tally once"), {Content: "done"}}, "helper": helper})
	n2 := nodetest.Start(t, config(second))
	var parent []messages.Envelope
	waitFor(t, 10*time.Second, "the parent's task to end", func() bool {
		parent = readAll(t, n2.Log(), "boss")
		last := parent[len(parent)-1].Type
		return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
	})
	if res := delegateResult(t, parent); res.Result != "tallied" {
		t.Fatalf("the delegate call's result after the restart: %+v", res)
	}
	child := readAll(t, n2.Log(), "boss.sub4")
	if tasks := payloads[*messages.TaskSubmitted](t, child); len(tasks) != 1 {
		t.Errorf("the child has %d tasks, want 1", len(tasks))
	}
	count := 0
	tallies.Range(func(_, v any) bool { count += *v.(*int); return true })
	if count != 1 || second.callsOf("helper") != 1 || second.callsOf("lead") != 1 {
		t.Errorf("after the restart: tally performed %d times in all, the child's model called %d times, the parent's %d; want 1, 1 and 1",
			count, second.callsOf("helper"), second.callsOf("lead"))
	}
	infos, err := n2.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true})
	if err != nil || len(infos) != 2 {
		t.Errorf("sessions: %+v %v; want the parent and one child", infos, err)
	}
}

// appendsBy is a node's view of the shared log that remembers which sessions the
// node appended to.
type appendsBy struct {
	eventlog.Log
	mu       sync.Mutex
	sessions map[string]int
}

func (l *appendsBy) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 {
		l.mu.Lock()
		l.sessions[events[0].SessionID]++
		l.mu.Unlock()
	}
	return l.Log.Append(ctx, events)
}

func (l *appendsBy) wrote(session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessions[session]
}

// In a cluster, a child session is routed by its own key like any session: a
// parent on node a delegates to a child whose partition node b owns; b runs the
// child, a the parent, and the child's answer is a's tool result.
func TestDelegateInACluster(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "the helper says 42"}},
		"helper": helperScript,
	})
	start := func(name string) (*node.Node, *appendsBy, *partitionRecorder) {
		clients, err := kafka.DialNode(k.brokers, group, k.layout(memoryClusterPartitions), watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		log := &appendsBy{Log: shared, sessions: map[string]int{}}
		cfg := subagentsConfig(model)
		cfg.Log, cfg.NodeID, cfg.DataDir = log, name, t.TempDir()
		cfg.Bus = &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf}
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
		t.Cleanup(func() { stop(); _ = clients.Close() })
		return n, log, rec
	}
	a, logA, partsA := start("a")
	b, logB, partsB := start("b")
	waitPartitionsSplit(t, a, b)
	parent := ""
	for i := range 1000 {
		id := fmt.Sprintf("p%d", i)
		child := node.ChildSessionID(messages.EffectKey{SessionID: id, Seq: 4})
		if partsA.owns(kafka.PartitionOf(id, memoryClusterPartitions)) && partsB.owns(kafka.PartitionOf(child, memoryClusterPartitions)) {
			parent = id
			break
		}
	}
	if parent == "" {
		t.Fatal("no session of 1,000 is node a's with a child on node b's partitions")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.RunTask(ctx, node.Task{Input: "Ask the helper for 6*7.", SessionID: parent, Agent: "lead"})
	if err != nil || res.Status != messages.StatusCompleted {
		t.Fatalf("the parent's task: %+v %v", res, err)
	}
	events := readAll(t, shared, parent)
	key := delegateKey(t, events)
	child := node.ChildSessionID(key)
	if r := delegateResult(t, events); r.Result != "42" {
		t.Errorf("the delegate call's result: %+v", r)
	}
	if tasks := payloads[*messages.TaskSubmitted](t, readAll(t, shared, child)); len(tasks) != 1 || tasks[0].Parent == nil || tasks[0].Parent.SessionID != parent {
		t.Errorf("the child's tasks: %+v", tasks)
	}
	if logA.wrote(parent) == 0 || logB.wrote(parent) != 0 || logB.wrote(child) == 0 || logA.wrote(child) != 0 {
		t.Errorf("appends: the parent by a %d and b %d, the child by a %d and b %d; want the parent by a alone, the child by b alone",
			logA.wrote(parent), logB.wrote(parent), logA.wrote(child), logB.wrote(child))
	}
}
