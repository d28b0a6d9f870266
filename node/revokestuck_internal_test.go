package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// downLog is a SQLite log that is down for one session: each of its writes fails
// (entered is closed on the first).
type downLog struct {
	*sqlite.Log
	session string
	once    sync.Once
	entered chan struct{}
}

func (l *downLog) fail(events []messages.Envelope) bool {
	if len(events) == 0 || events[0].SessionID != l.session {
		return false
	}
	l.once.Do(func() { close(l.entered) })
	return true
}

var errDown = errors.New("the log is unreachable")

func (l *downLog) Append(ctx context.Context, events []messages.Envelope) error {
	if l.fail(events) {
		return errDown
	}
	return l.Log.Append(ctx, events)
}

func (l *downLog) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	if l.fail(events) {
		return errDown
	}
	return l.Log.AppendLeased(ctx, lease, events)
}

func (l *downLog) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	if l.fail(events) {
		return errDown
	}
	return l.Log.ClaimLeased(ctx, lease, events)
}

// TestRevokedStopsASessionRetryingAWrite: a session's actor retries its task's write
// for as long as the log is down when the node's partitions are revoked, with
// another task of the session queued behind. Revoked stops the actor once the grace
// is over, and returns only once it stopped: the actor does not outlive the node's
// lease, to find its write fenced once the lease is dropped (its retries would go on
// until then, and the Stop behind them wait), and both tasks are answered
// ErrNotOwner, retryable (their next owner reads them again), while the log is still
// down.
func TestRevokedStopsASessionRetryingAWrite(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &downLog{Log: base, session: "stuck", entered: make(chan struct{})}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, HandoffGrace: 50 * time.Millisecond,
		Bus: &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	n.Assigned([]int{0}, 1)

	submit := func(input string) *futureResult {
		env, err := n.ingress.Admit(Task{Input: input, SessionID: "stuck"})
		if err != nil {
			t.Fatal(err)
		}
		// As handleTask asks; the timeout stands for SubmitTimeout.
		f := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 30*time.Second)
		r := &futureResult{done: make(chan struct{})}
		go func() { defer close(r.done); r.res, r.err = f.Result() }()
		return r
	}
	first := submit("first")
	select {
	case <-log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its first task")
	}
	queued := submit("second")

	revoked := make(chan struct{})
	go func() { defer close(revoked); n.Revoked() }()
	select {
	case <-revoked:
	case <-time.After(60 * time.Second):
		t.Fatal("Revoked hung")
	}

	for what, r := range map[string]*futureResult{"the task being written": first, "the queued task": queued} {
		select {
		case <-r.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the future hung", what)
		}
		if r.err != nil {
			t.Errorf("%s got no answer: %v; want ErrNotOwner", what, r.err)
		} else if e, ok := r.res.(error); !ok || !errors.Is(e, actors.ErrNotOwner) {
			t.Errorf("%s was answered %v; want ErrNotOwner", what, r.res)
		}
	}
	if e, _ := first.res.(error); errors.Is(e, eventlog.ErrFenced) {
		t.Errorf("the task being written was answered %v: the actor outlived Revoked and the node's lease; want it stopped by the revoke", e)
	}
}
