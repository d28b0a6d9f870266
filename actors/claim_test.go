package actors_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// submitNew submits a task with a new ID (SubmitTask.New) and returns the answer:
// a *TaskAccepted or an error.
func (h *harness) submitNew(session, id, payload string) any {
	h.t.Helper()
	e := messages.Envelope{ID: id, SessionID: session, Type: messages.TypeTaskSubmitted, Version: 1, Actor: "test", Payload: []byte(payload)}
	res, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e, New: true}, 10*time.Second).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func readCounting(store **readsBySession) func(*sqlite.Log) actors.EventStore {
	return func(l *sqlite.Log) actors.EventStore {
		*store = &readsBySession{EventStore: l, reads: map[string]int{}}
		return *store
	}
}

// conflictCounting is an event store that counts the appends the log refuses with
// ErrSeqConflict, and the reads of each session.
type conflictCounting struct {
	*readsBySession
	conflicts atomic.Int32
}

func (c *conflictCounting) Append(ctx context.Context, events []messages.Envelope) error {
	err := c.readsBySession.Append(ctx, events)
	if errors.Is(err, eventlog.ErrSeqConflict) {
		c.conflicts.Add(1)
	}
	return err
}

func conflictsCounting(store **conflictCounting) func(*sqlite.Log) actors.EventStore {
	return func(l *sqlite.Log) actors.EventStore {
		*store = &conflictCounting{readsBySession: &readsBySession{EventStore: l, reads: map[string]int{}}}
		return *store
	}
}

// A new task (SubmitTask.New) of a session with no events starts the session
// without reading its log: the task is recorded at seq 1 and runs to the end.
func TestNewTaskOfANewSessionReadsNoLog(t *testing.T) {
	var store *readsBySession
	h := newHarness(t, harnessOpts{model: llm.Offline{}, store: readCounting(&store)})
	acc, ok := h.submitNew("s", "t1", `{"input":"echo hi"}`).(*actors.TaskAccepted)
	if !ok || acc.Seq != 1 || acc.Duplicate {
		t.Fatalf("new task of a new session: %+v", acc)
	}
	events := h.wait("s")
	assertGapFree(t, events)
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "hi" {
		t.Fatalf("output %q", got)
	}
	if r := store.of("s"); r != 0 {
		t.Fatalf("the session read its log %d times, want none", r)
	}
}

// A new task of a session the host ran before (passivated since) reads the
// session's events before it, rather than claim seq 1, which they hold: the task
// is recorded after them, with the history in the prompt.
func TestNewTaskOfASessionWithHistoryReadsIt(t *testing.T) {
	var store *conflictCounting
	model := &promptsModel{Model: llm.Offline{}, prompts: map[string][]messages.ChatMessage{}}
	h := newHarness(t, harnessOpts{model: model, idle: 20 * time.Millisecond, store: conflictsCounting(&store)})
	if acc, ok := h.submitNew("s", "t1", `{"input":"echo first"}`).(*actors.TaskAccepted); !ok || acc.Seq != 1 {
		t.Fatalf("first task: %+v", acc)
	}
	h.wait("s")
	waitUntil(t, "the session passivated", func() bool { return h.sessions() == 0 })
	acc, ok := h.submitNew("s", "t2", `{"input":"echo second"}`).(*actors.TaskAccepted)
	if !ok || acc.Seq != 5 {
		t.Fatalf("second task: %+v, want it accepted at seq 5", acc)
	}
	events := h.wait("s")
	for len(events) < 8 {
		events = h.wait("s")
	}
	assertGapFree(t, events)
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "second" {
		t.Fatalf("second output %q", got)
	}
	var text []string
	for _, m := range model.prompt("s/6") {
		text = append(text, m.Content)
	}
	if all := strings.Join(text, " | "); !strings.Contains(all, "echo first") {
		t.Fatalf("the second task's model call did not see the first task: %s", all)
	}
	// Not by the first incarnation (it claimed seq 1), once by the second, which
	// claimed nothing.
	if r, c := store.of("s"), store.conflicts.Load(); r != 1 || c != 0 {
		t.Fatalf("the session read its log %d times (want once), and %d appends were refused (want none)", r, c)
	}
}

// A new task whose payload the fold refuses is answered with the error and writes
// nothing; the session, which has still read nothing, records the next task as
// its first event.
func TestNewTaskRefusedLeavesTheSessionUnread(t *testing.T) {
	var store *readsBySession
	h := newHarness(t, harnessOpts{model: llm.Offline{}, store: readCounting(&store)})
	if res := h.submitNew("s", "bad", `{"input":5}`); res == nil {
		t.Fatal("a task.submitted whose input is a number was accepted")
	} else if _, ok := res.(error); !ok {
		t.Fatalf("bad task answered %#v, want an error", res)
	}
	acc, ok := h.submitNew("s", "t1", `{"input":"echo hi"}`).(*actors.TaskAccepted)
	if !ok || acc.Seq != 1 {
		t.Fatalf("the next task: %+v, want it accepted at seq 1", acc)
	}
	events := h.wait("s")
	assertGapFree(t, events)
	if events[0].ID != "t1" {
		t.Fatalf("first event %s, want the task t1", events[0].ID)
	}
	if r := store.of("s"); r != 0 {
		t.Fatalf("the session read its log %d times, want none", r)
	}
}

// After a crash, a new task of a session whose earlier task was left running (its
// model call requested, unanswered) finds seq 1 taken (the host of the new process
// never ran the session): the log refuses the claim, and the session reads its
// events, resumes the earlier task, and records the new one after them.
func TestNewTaskOfASessionLeftRunningByACrash(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st := actors.NewSessionState("s")
	agent := actors.Agent{Model: "offline", SystemPrompt: "test"}
	first := env(t, &messages.TaskSubmitted{Input: "echo first"}, "s", 1, "t1")
	first.ID = "t1"
	if err := st.Apply(first); err != nil {
		t.Fatal(err)
	}
	req := env(t, st.Decide(agent, 2, 0).Payload, "s", 2, "t1")
	req.ID = "s/2"
	if err := lg.Append(ctx, []messages.Envelope{first, req}); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	var store *conflictCounting
	h := newHarness(t, harnessOpts{model: llm.Offline{}, dir: dir, store: conflictsCounting(&store)})
	acc, ok := h.submitNew("s", "t2", `{"input":"echo second"}`).(*actors.TaskAccepted)
	if !ok || acc.Seq < 3 {
		t.Fatalf("second task: %+v, want it accepted after the first task's events", acc)
	}
	var events []messages.Envelope
	waitUntil(t, "the second task ended", func() bool {
		events, err = h.log.Read(ctx, "s", 1)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events, func(e messages.Envelope) bool {
			return e.CorrelationID == "t2" && (e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed)
		})
	})
	assertGapFree(t, events)
	if events[0].ID != "t1" || events[1].ID != "s/2" || events[acc.Seq-1].ID != "t2" {
		t.Fatalf("events %s: want t1 and its request kept, and t2 at seq %d", types(events), acc.Seq)
	}
	if r, c := store.of("s"), store.conflicts.Load(); r != 1 || c != 1 {
		t.Fatalf("the session read its log %d times and had %d appends refused, want once each", r, c)
	}
}
