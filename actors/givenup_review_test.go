package actors_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/eventlogtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
)

// The failure a task given up on quotes is redacted before it is cut, not after:
// a secret across the cut would otherwise have its head recorded, which no
// redaction recognizes once it is cut (a known value is matched whole).
func TestAGivenUpTasksErrorDoesNotRecordTheHeadOfASecretAcrossTheCut(t *testing.T) {
	const secret = "Zq7-supersecret-value-abcdef012345"
	store := &eventlogtest.PanicsOnToolResult{Session: "cut", Value: strings.Repeat("x", 985) + " " + secret}
	noop := funcTool{"noop", func(context.Context, tools.Call) (string, error) { return "ok", nil }}
	h := newHarness(t, harnessOpts{
		model: script(t, calls(messages.ToolCall{ID: "c1", Name: "noop", Arguments: "{}"})),
		tools: []tools.Tool{noop},
		store: func(lg *sqlite.Log) actors.EventStore { store.Log = lg; return store },
		deps:  func(d *actors.SessionDeps) { d.Redactor = redact.New(secret) },
	})
	h.submit("cut", "t-1", "go")
	events := h.waitWithin("cut", 30*time.Second)
	last := events[len(events)-1]
	p, err := last.Decode()
	if err != nil {
		t.Fatal(err)
	}
	f, ok := p.(*messages.TaskFailed)
	if !ok || f.Reason != messages.ReasonSessionFailed {
		t.Fatalf("the task ended with %s %+v; want task.failed, %s", last.Type, p, messages.ReasonSessionFailed)
	}
	if strings.Contains(f.Error, secret[:8]) {
		t.Errorf("the task's error records the head of a secret: ...%q", f.Error[max(0, len(f.Error)-40):])
	}
}

// A session given up on for a failure that is no task's (the late answer of a
// task that ended, which the node sends again each time the session folds its
// log, LateCalls) is not started again and again: the starts that find no task
// to end stop. Nor does the running task, which did not fail, pay for it.
func TestAGivenUpSessionFailingOnALateAnswerDoesNotLoop(t *testing.T) {
	store := &refusingTypes{refuse: map[string][]messages.Type{"late-loop": {messages.TypeToolCallCompleted}}}
	var hostPID atomic.Pointer[actor.PID]
	var system atomic.Pointer[actor.ActorSystem]
	var loads atomic.Int64
	gate := funcTool{"gate", func(ctx context.Context, _ tools.Call) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}}
	h := newHarness(t, harnessOpts{
		model: script(t, calls(messages.ToolCall{ID: "g1", Name: "gate", Arguments: "{}"})),
		tools: []tools.Tool{gate},
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
		deps: func(d *actors.SessionDeps) {
			// As the node does (parentEnds.recovered): the waits for the calls'
			// children, which have ended, answer at once.
			d.LateCalls = func(session string, keys []string) {
				loads.Add(1)
				for _, k := range keys {
					go func() {
						if sys, pid := system.Load(), hostPID.Load(); sys != nil && pid != nil {
							_, _ = sys.Root.RequestFuture(pid, &actors.LateAnswer{SessionID: session, Key: k}, 5*time.Second).Result()
						}
					}()
				}
			}
		},
	})
	system.Store(h.system)
	hostPID.Store(h.host)
	// task-1 ended (cancelled) with a delegate call unanswered: its late answer
	// is recorded after its end, and the log refuses it each time.
	key := recordCancelledWithCall(t, h, "late-loop", actors.ContextRules)
	// task-2 runs, waiting on its tool: nothing of it fails.
	h.submit("late-loop", "task-2", "go")
	h.answerLate(&actors.LateAnswer{SessionID: "late-loop", Key: key})

	time.Sleep(3 * time.Second)
	n := store.refusals("late-loop")
	time.Sleep(2 * time.Second)
	if m := store.refusals("late-loop"); m != n {
		t.Errorf("the session was started again and again: %d refused writes, %d two seconds later (%d folds)", n, m, loads.Load())
	}
	events, err := h.log.Read(context.Background(), "late-loop", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.CorrelationID == "task-2" && e.Type == messages.TypeTaskFailed {
			p, _ := e.Decode()
			t.Errorf("task-2, which did not fail, was failed: %+v", p)
		}
	}
}

// panickingReads is a store whose Read panics, for one session, at every call.
type panickingReads struct {
	actors.EventStore
	session string
	reads   atomic.Int64
}

func (s *panickingReads) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == s.session {
		s.reads.Add(1)
		panic("a log that cannot be read")
	}
	return s.EventStore.Read(ctx, session, from)
}

// A session whose log panics at every read is given up on, started again once
// to end its task, given up on again, and left there: its reads stop.
func TestAGivenUpSessionWhoseLogCannotBeReadDoesNotLoop(t *testing.T) {
	store := &panickingReads{session: "unreadable"}
	h := newHarness(t, harnessOpts{
		model: script(t, calls(messages.ToolCall{ID: "c1", Name: "noop", Arguments: "{}"})),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	// The session has events: its actor reads its log before its new task.
	recordCancelledWithCall(t, h, "unreadable", actors.ContextRules)
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = "t-2", "unreadable", "test"
	_, _ = h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
	time.Sleep(2 * time.Second)
	n := store.reads.Load()
	time.Sleep(time.Second)
	if m := store.reads.Load(); m != n || n > 12 {
		t.Errorf("the session's log was read %d times, then %d; want at most 12, then none", n, m)
	}
}
