package actors_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// refusingTypes is a store that refuses, for their content, the batches of a
// session that hold an event of one of its refused types.
type refusingTypes struct {
	actors.EventStore
	refuse  map[string][]messages.Type
	refused sync.Map // session → *atomic.Int64
}

func (s *refusingTypes) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		for _, typ := range s.refuse[e.SessionID] {
			if e.Type == typ {
				c, _ := s.refused.LoadOrStore(e.SessionID, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
				return fmt.Errorf("refused: %w", eventlog.ErrInvalidEvent)
			}
		}
	}
	return s.EventStore.Append(ctx, events)
}

func (s *refusingTypes) refusals(session string) int64 {
	c, ok := s.refused.Load(session)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// lockedLog is a log handler's output, written and read under a lock.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A session whose log refuses its writes at each try of a task is given up on by
// its supervisor, and the task fails then with session_failed, saying that the log
// refused the writes. When the log refuses the task's end too, the session is not
// started again and again: the actor started to end it is given up on in turn,
// the host says so in its log, and stops there (the session's next message starts
// it again).
func TestAGivenUpSessionWhoseLogRefusesItsWritesDoesNotLoop(t *testing.T) {
	store := &refusingTypes{refuse: map[string][]messages.Type{
		"refused":    {messages.TypeToolCallCompleted},
		"unwritable": {messages.TypeToolCallCompleted, messages.TypeTaskFailed},
	}}
	var logged lockedLog
	noop := funcTool{"noop", func(context.Context, tools.Call) (string, error) { return "ok", nil }}
	h := newHarness(t, harnessOpts{
		model: script(t, calls(messages.ToolCall{ID: "c1", Name: "noop", Arguments: "{}"})),
		tools: []tools.Tool{noop},
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
		deps: func(d *actors.SessionDeps) {
			d.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelError}))
		},
	})
	h.submit("refused", "t-1", "go")
	h.submit("unwritable", "t-2", "go")

	events := h.waitWithin("refused", 30*time.Second)
	last := events[len(events)-1]
	p, err := last.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonSessionFailed ||
		!strings.Contains(f.Error, "the event log refused the session's writes") || !strings.Contains(f.Error, "invalid event") {
		t.Errorf("the task ended with %s %+v; want task.failed, %s, saying the log refused its writes", last.Type, p, messages.ReasonSessionFailed)
	}

	// Five restarts and a sixth failure, then as many for the actor that tries
	// to record the task's end: then nothing more.
	deadline := time.Now().Add(30 * time.Second)
	for store.refusals("unwritable") < 12 || !strings.Contains(logged.String(), "could not be ended") {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused writes; log:\n%s", store.refusals("unwritable"), logged.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := store.refusals("unwritable")
	time.Sleep(500 * time.Millisecond)
	if m := store.refusals("unwritable"); m != n || n > 12 {
		t.Errorf("the session was tried again and again: %d refused writes, then %d; want 12", n, m)
	}
}
