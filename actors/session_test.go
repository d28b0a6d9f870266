package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// funcTool is a tool defined by a function, for tests.
type funcTool struct {
	name string
	fn   func(ctx context.Context, c tools.Call) (string, error)
}

func (f funcTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: f.name, Description: "test tool"}
}
func (f funcTool) Call(ctx context.Context, c tools.Call) (string, error) {
	return f.fn(ctx, c)
}

// countingModel counts calls per idempotency key.
type countingModel struct {
	llm.Model
	mu    sync.Mutex
	calls map[string]int
}

func (m *countingModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[r.Key]++
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func (m *countingModel) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.calls {
		n += c
	}
	return n
}

type harness struct {
	t       *testing.T
	system  *actor.ActorSystem
	host    *actor.PID
	log     *sqlite.Log
	store   actors.EventStore
	effects *actors.LocalEffects
}

type harnessOpts struct {
	model       llm.Model
	tools       []tools.Tool
	toolTimeout time.Duration
	maxSteps    int
	idle        time.Duration
	store       func(*sqlite.Log) actors.EventStore
	dir         string
	// deps, when set, adjusts the host's dependencies.
	deps func(*actors.SessionDeps)
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	ctx := context.Background()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: o.dir})
	if err != nil {
		t.Fatal(err)
	}
	var store actors.EventStore = lg
	if o.store != nil {
		store = o.store(lg)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	reg, err := tools.NewRegistry(o.tools...)
	if err != nil {
		t.Fatal(err)
	}
	effects := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: o.model, Tools: reg, ToolTimeout: o.toolTimeout})
	deps := actors.SessionDeps{
		Store: store, Configs: lg, Effects: effects, IdleTimeout: o.idle,
		Agent: actors.Agent{Model: o.model.Name(), SystemPrompt: "test", Tools: reg.Specs(), MaxSteps: o.maxSteps},
	}
	if o.deps != nil {
		o.deps(&deps)
	}
	host := sys.Root.Spawn(actors.NewSessionHostProps(deps))
	h := &harness{t: t, system: sys, host: host, log: lg, store: store, effects: effects}
	t.Cleanup(func() {
		_ = sys.Root.PoisonFuture(host).Wait()
		_ = effects.Close()
		sys.Shutdown()
		_ = lg.Close()
	})
	return h
}

func (h *harness) submit(session, id, input string) *actors.TaskAccepted {
	h.t.Helper()
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input})
	if err != nil {
		h.t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	res, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	acc, ok := res.(*actors.TaskAccepted)
	if !ok {
		h.t.Fatalf("submit: %v", res)
	}
	return acc
}

// wait polls the log until the session's latest task has finished (deadline 10 s).
func (h *harness) wait(session string) []messages.Envelope {
	h.t.Helper()
	return h.waitWithin(session, 10*time.Second)
}

// waitWithin is wait with a deadline of its own, for a task whose decisions
// count megabytes (the race detector makes them several times slower).
func (h *harness) waitWithin(session string, within time.Duration) []messages.Envelope {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		events, err := h.log.Read(context.Background(), session, 1)
		if err != nil {
			h.t.Fatal(err)
		}
		if n := len(events); n > 0 && (events[n-1].Type == messages.TypeTaskCompleted || events[n-1].Type == messages.TypeTaskFailed) {
			return events
		}
		time.Sleep(2 * time.Millisecond)
	}
	events, _ := h.log.Read(context.Background(), session, 1)
	h.t.Fatalf("session %s did not finish in %s; events: %s", session, within, types(events))
	return nil
}

func types(events []messages.Envelope) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = fmt.Sprintf("%d:%s", e.Seq, e.Type)
	}
	return strings.Join(s, " ")
}

func decode[T messages.Payload](t *testing.T, e messages.Envelope) T {
	t.Helper()
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := p.(T)
	if !ok {
		t.Fatalf("event %d is %s", e.Seq, e.Type)
	}
	return v
}

func script(t *testing.T, steps ...llm.ScriptStep) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func calls(cs ...messages.ToolCall) llm.ScriptStep { return llm.ScriptStep{ToolCalls: cs} }

func assertGapFree(t *testing.T, events []messages.Envelope) {
	t.Helper()
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("seq %d at position %d: %s", e.Seq, i, types(events))
		}
	}
}

func TestParallelToolCallsThenAnswer(t *testing.T) {
	var inflight, peak atomic.Int32
	slow := funcTool{"slow", func(ctx context.Context, c tools.Call) (string, error) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		inflight.Add(-1)
		return "ok " + c.Arguments, nil
	}}
	h := newHarness(t, harnessOpts{model: script(t,
		calls(messages.ToolCall{ID: "1", Name: "slow", Arguments: "a"}, messages.ToolCall{ID: "2", Name: "slow", Arguments: "b"}, messages.ToolCall{ID: "3", Name: "slow", Arguments: "c"}),
		llm.ScriptStep{Content: "all done"}), tools: []tools.Tool{slow}})
	h.submit("s1", "task-1", "go")
	events := h.wait("s1")
	assertGapFree(t, events)
	want := "1:task.submitted 2:model.requested 3:model.responded 4:tool.requested 5:tool.requested 6:tool.requested"
	if !strings.HasPrefix(types(events), want) {
		t.Fatalf("events: %s", types(events))
	}
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]); got.Output != "all done" || got.Steps != 2 {
		t.Fatalf("completion: %+v", got)
	}
	if peak.Load() < 2 {
		t.Fatalf("tool calls ran one at a time (peak %d)", peak.Load())
	}
	// Tool results reach the model in call order, whatever order they completed in.
	for _, e := range events {
		if e.CorrelationID != "task-1" {
			t.Fatalf("event %d has correlation %q", e.Seq, e.CorrelationID)
		}
	}
}

func TestPanickingToolBecomesAnErrorResult(t *testing.T) {
	boom := funcTool{"boom", func(context.Context, tools.Call) (string, error) { panic("kaboom") }}
	h := newHarness(t, harnessOpts{model: script(t, calls(messages.ToolCall{ID: "1", Name: "boom", Arguments: "{}"}), llm.ScriptStep{Content: "recovered"}), tools: []tools.Tool{boom}})
	h.submit("s", "t", "go")
	events := h.wait("s")
	var completed *messages.ToolCallCompleted
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			completed = decode[*messages.ToolCallCompleted](t, e)
		}
	}
	if completed == nil || !strings.Contains(completed.Error, "panicked") || !strings.Contains(completed.Error, "kaboom") {
		t.Fatalf("tool result: %+v", completed)
	}
	if decode[*messages.TaskCompleted](t, events[len(events)-1]).Output != "recovered" {
		t.Fatal("the session must go on after a tool panic")
	}
}

func TestToolTimeoutAndBadArgumentsReachTheModel(t *testing.T) {
	hang := funcTool{"hang", func(ctx context.Context, _ tools.Call) (string, error) { <-ctx.Done(); return "", ctx.Err() }}
	picky := funcTool{"picky", func(_ context.Context, c tools.Call) (string, error) {
		return "", fmt.Errorf("%w: expected JSON, got %q", tools.ErrInvalidArguments, c.Arguments)
	}}
	h := newHarness(t, harnessOpts{toolTimeout: 50 * time.Millisecond, tools: []tools.Tool{hang, picky}, model: script(t,
		calls(messages.ToolCall{ID: "1", Name: "hang", Arguments: "{}"}, messages.ToolCall{ID: "2", Name: "picky", Arguments: "{oops"}),
		llm.ScriptStep{Content: "fine"})})
	h.submit("s", "t", "go")
	events := h.wait("s")
	errs := map[string]string{}
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			c := decode[*messages.ToolCallCompleted](t, e)
			errs[c.Tool] = c.Error
		}
	}
	if !strings.Contains(errs["hang"], "timed out") || !strings.Contains(errs["picky"], "invalid tool arguments") {
		t.Fatalf("tool errors: %v", errs)
	}
}

func TestMaxStepsStopsALoopingModel(t *testing.T) {
	loop := funcTool{"again", func(context.Context, tools.Call) (string, error) { return "more", nil }}
	// Calls with other arguments each time, so that loop detection (stops_test.go)
	// does not stop the task first.
	step := func(n int) llm.ScriptStep {
		return calls(messages.ToolCall{ID: "x", Name: "again", Arguments: fmt.Sprintf(`{"n":%d}`, n)})
	}
	h := newHarness(t, harnessOpts{maxSteps: 3, tools: []tools.Tool{loop}, model: script(t, step(1), step(2), step(3), step(4), step(5))})
	h.submit("s", "t", "go")
	events := h.wait("s")
	f := decode[*messages.TaskFailed](t, events[len(events)-1])
	if f.Reason != messages.ReasonMaxSteps || f.Steps != 3 {
		t.Fatalf("failure: %+v", f)
	}
}

func TestModelErrorFailsTheTask(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "1", Name: "missing", Arguments: "{}"}}})})
	h.submit("s", "t", "go")
	events := h.wait("s")
	// Step 1 calls an unknown tool (answered with an error), step 2 has no script.
	f := decode[*messages.TaskFailed](t, events[len(events)-1])
	if f.Reason != messages.ReasonModelError || !strings.Contains(f.Error, "no response for this step") {
		t.Fatalf("failure: %+v; events %s", f, types(events))
	}
}

func TestDuplicateTaskMessageIsIgnored(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "hi"})})
	h.submit("s", "t", "go")
	h.wait("s")
	if acc := h.submit("s", "t", "go"); !acc.Duplicate {
		t.Fatal("a redelivered task message must be recognised")
	}
	events, _ := h.log.Read(context.Background(), "s", 1)
	if len(events) != 4 {
		t.Fatalf("a duplicate changed the log: %s", types(events))
	}
}

func TestTasksOfOneSessionRunInOrderAndShareHistory(t *testing.T) {
	model := &countingModel{Model: llm.Offline{}}
	h := newHarness(t, harnessOpts{model: model})
	h.submit("s", "t1", "echo one")
	h.submit("s", "t2", "echo two")
	events := h.wait("s")
	for len(events) < 8 {
		events = h.wait("s")
	}
	assertGapFree(t, events)
	var outs []string
	for _, e := range events {
		if e.Type == messages.TypeTaskCompleted {
			outs = append(outs, decode[*messages.TaskCompleted](t, e).Output)
		}
	}
	if strings.Join(outs, ",") != "one,two" {
		t.Fatalf("outputs %v; events %s", outs, types(events))
	}
	second := decode[*messages.ModelRequested](t, events[len(events)-3])
	if second.Messages != 4 { // system, user, assistant, user
		t.Fatalf("the second task must see the first one's history: %+v", second)
	}
}

// flakyStore fails one append (the failAt-th), as a full disk or a conflicting writer
// would; reads counts the folds.
type flakyStore struct {
	actors.EventStore
	mu     sync.Mutex
	writes int
	failAt int
	err    error
	reads  atomic.Int32
}

func (f *flakyStore) Append(ctx context.Context, events []messages.Envelope) error {
	f.mu.Lock()
	f.writes++
	fail := f.writes == f.failAt
	f.mu.Unlock()
	if fail {
		return f.err
	}
	return f.EventStore.Append(ctx, events)
}

func (f *flakyStore) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	f.reads.Add(1)
	return f.EventStore.Read(ctx, id, from)
}

func TestSessionActorRidesOutALogOutageAndRefoldsAfterAConflict(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		folds int32
	}{
		// A log that is down is retried in place: no restart, one fold.
		{"outage", errors.New("disk full"), 1},
		// A batch the log refuses for its content restarts the actor, which refolds.
		{"conflict", fmt.Errorf("wrapped: %w", eventlog.ErrSeqConflict), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var invocations atomic.Int32
			counter := funcTool{"count", func(context.Context, tools.Call) (string, error) { invocations.Add(1); return "1", nil }}
			model := &countingModel{Model: script(t, calls(messages.ToolCall{ID: "1", Name: "count", Arguments: "{}"}), llm.ScriptStep{Content: "done"})}
			var store *flakyStore
			h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{counter}, store: func(l *sqlite.Log) actors.EventStore {
				// submit, model reply + tool request, then the tool result's write fails
				store = &flakyStore{EventStore: l, failAt: 3, err: c.err}
				return store
			}})
			h.submit("s", "t", "go")
			events := h.wait("s")
			assertGapFree(t, events)
			if decode[*messages.TaskCompleted](t, events[len(events)-1]).Output != "done" {
				t.Fatal("the task must complete")
			}
			// The model's first answer was recorded before the failure: it is never asked again.
			if model.total() != 2 {
				t.Fatalf("model calls: %v", model.calls)
			}
			// A lost tool result is re-issued with the same key: at most one extra
			// invocation, never for a recorded result.
			if n := invocations.Load(); n < 1 || n > 2 {
				t.Fatalf("tool invocations: %d", n)
			}
			if got := store.reads.Load(); got != c.folds {
				t.Fatalf("folds: %d, want %d", got, c.folds)
			}
		})
	}
}

// TestFencedSessionStops: an append refused with eventlog.ErrFenced (another node
// took the session's partition) stops the session actor: no retry, no restart and
// refold, no further effect; a task it was recording is answered with an error
// that says the node does not own the session (the bus redelivers the task to the
// new owner) rather than a permanent failure.
func TestFencedSessionStops(t *testing.T) {
	fenced := fmt.Errorf("wrapped: %w", eventlog.ErrFenced)
	t.Run("recording a task", func(t *testing.T) {
		model := &countingModel{Model: script(t, llm.ScriptStep{Content: "done"})}
		var store *flakyStore
		h := newHarness(t, harnessOpts{model: model, store: func(l *sqlite.Log) actors.EventStore {
			store = &flakyStore{EventStore: l, failAt: 1, err: fenced}
			return store
		}})
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Actor = "t", "s", "test"
		res, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err, _ := res.(error); !errors.Is(err, eventlog.ErrFenced) || !errors.Is(err, actors.ErrNotOwner) {
			t.Fatalf("SubmitTask on a fenced session answered %v, want an error wrapping ErrFenced and ErrNotOwner", res)
		}
		h.waitStopped()
		store.mu.Lock()
		writes := store.writes
		store.mu.Unlock()
		if writes != 1 || store.reads.Load() != 1 || model.total() != 0 {
			t.Fatalf("after the fenced append: %d appends, %d folds, %d model calls; want 1, 1, 0", writes, store.reads.Load(), model.total())
		}
	})
	t.Run("recording an effect's result", func(t *testing.T) {
		var invocations atomic.Int32
		counter := funcTool{"count", func(context.Context, tools.Call) (string, error) { invocations.Add(1); return "1", nil }}
		model := &countingModel{Model: script(t, calls(messages.ToolCall{ID: "1", Name: "count", Arguments: "{}"}), llm.ScriptStep{Content: "done"})}
		var store *flakyStore
		h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{counter}, store: func(l *sqlite.Log) actors.EventStore {
			// the task, then the model's answer (with the tool call it asks for) is fenced
			store = &flakyStore{EventStore: l, failAt: 2, err: fenced}
			return store
		}})
		h.submit("s", "t", "go")
		h.waitStopped()
		store.mu.Lock()
		writes := store.writes
		store.mu.Unlock()
		if writes != 2 || store.reads.Load() != 1 || invocations.Load() != 0 {
			t.Fatalf("after the fenced append: %d appends, %d folds, %d tool calls; want 2, 1, 0", writes, store.reads.Load(), invocations.Load())
		}
		events, err := h.log.Read(context.Background(), "s", 1)
		if err != nil || len(events) != 2 {
			t.Fatalf("the log holds %s (%v); want the task and the model request only", types(events), err)
		}
	})
}

// waitStopped waits until the host runs no session actor (deadline 10 s).
func (h *harness) waitStopped() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := h.system.Root.RequestFuture(h.host, &actors.CountSessions{}, time.Second).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%v session actors still run after 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecoveryReissuesOnlyUnansweredEffects(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	// A session recorded by an earlier process: the model answered (recorded), two tool
	// calls were requested, one completed; then the process died.
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st := actors.NewSessionState("s")
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{{Name: "rec", Description: "test tool"}}}
	var recorded []messages.Envelope
	add := func(p messages.Payload) messages.Envelope {
		e := env(t, p, "s", st.LastSeq+1, "t")
		e.ID = fmt.Sprintf("s/%d", e.Seq)
		if p.MessageType() == messages.TypeTaskSubmitted {
			e.ID = "t"
		}
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, e)
		return e
	}
	add(&messages.TaskSubmitted{Input: "go"})
	mr := st.Decide(agent, 2, 0).Payload.(*messages.ModelRequested)
	add(mr)
	add(&messages.ModelResponded{Key: mr.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{
		{ID: "1", Name: "rec", Arguments: "a"}, {ID: "2", Name: "rec", Arguments: "b"}}}})
	r1 := st.Decide(agent, 4, 0).Payload.(*messages.ToolCallRequested)
	add(r1)
	r2 := st.Decide(agent, 5, 0).Payload.(*messages.ToolCallRequested)
	add(r2)
	add(&messages.ToolCallCompleted{Key: r1.Key, CallID: "1", Tool: "rec", Result: "did a"})
	if err := lg.Append(ctx, recorded); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	var mu sync.Mutex
	var keys []string
	rec := funcTool{"rec", func(_ context.Context, c tools.Call) (string, error) {
		mu.Lock()
		keys = append(keys, c.Key+"="+c.Arguments)
		mu.Unlock()
		return "did " + c.Arguments, nil
	}}
	model := &countingModel{Model: script(t, llm.ScriptStep{Content: "unused"}, llm.ScriptStep{Content: "finished"})}
	h := newHarness(t, harnessOpts{dir: dir, model: model, tools: []tools.Tool{rec}})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	assertGapFree(t, events)
	if len(keys) != 1 || keys[0] != r2.Key+"=b" {
		t.Fatalf("re-issued tool calls: %v (want only %s with its recorded key)", keys, r2.Key)
	}
	if model.calls[mr.Key] != 0 || model.total() != 1 {
		t.Fatalf("model calls: %v (the recorded answer to %s must not be asked again)", model.calls, mr.Key)
	}
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "finished" {
		t.Fatalf("output %q", got)
	}
}

func TestIdleSessionsPassivateAndComeBack(t *testing.T) {
	var reads atomic.Int32
	h := newHarness(t, harnessOpts{idle: 20 * time.Millisecond, model: llm.Offline{}, store: func(l *sqlite.Log) actors.EventStore {
		return &readCounter{EventStore: l, reads: &reads}
	}})
	h.submit("s", "t1", "echo a")
	h.wait("s")
	// Wait until the actor passivated, then talk to the session again: a new actor
	// folds the log and continues with the next seq.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := h.system.Root.RequestFuture(h.host, &actors.CountSessions{}, time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n.(int) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle session never passivated")
		}
		time.Sleep(5 * time.Millisecond)
	}
	acc := h.submit("s", "t2", "echo b")
	if acc.Seq != 5 {
		t.Fatalf("the new incarnation assigned seq %d, want 5", acc.Seq)
	}
	events := h.wait("s")
	for len(events) < 8 {
		events = h.wait("s")
	}
	assertGapFree(t, events)
	if n := reads.Load(); n != 2 {
		t.Fatalf("the session was folded %d times, want 2 (one per incarnation)", n)
	}
}

// readCounter counts Read calls: each session actor incarnation reads its log once.
type readCounter struct {
	actors.EventStore
	reads *atomic.Int32
}

func (r *readCounter) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	r.reads.Add(1)
	return r.EventStore.Read(ctx, id, from)
}

func TestCancelStopsTheRunningTask(t *testing.T) {
	release := make(chan struct{})
	block := funcTool{"block", func(ctx context.Context, _ tools.Call) (string, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "late", nil
	}}
	t.Cleanup(func() { close(release) })
	h := newHarness(t, harnessOpts{tools: []tools.Tool{block}, model: script(t, calls(messages.ToolCall{ID: "1", Name: "block", Arguments: "{}"}), llm.ScriptStep{Content: "x"})})
	h.submit("s", "t", "go")
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := h.system.Root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := res.(*actors.TaskAccepted); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancel: %v", res)
		}
		time.Sleep(time.Millisecond)
	}
	events := h.wait("s")
	if f := decode[*messages.TaskFailed](t, events[len(events)-1]); f.Reason != messages.ReasonCancelled {
		t.Fatalf("failure: %+v", f)
	}
	res, _ := h.system.Root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 5*time.Second).Result()
	if err, ok := res.(error); !ok || !errors.Is(err, actors.ErrNoRunningTask) {
		t.Fatalf("cancelling an idle session: %v", res)
	}
}
