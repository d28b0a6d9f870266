package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// slowLog is a SQLite log whose first write of one session waits until release is
// closed, as a log that answers slowly would keep that session's actor busy.
type slowLog struct {
	*sqlite.Log
	session string
	once    sync.Once
	entered chan struct{} // closed once that write started
	release chan struct{}
	// written, when not nil, is closed once that write returned.
	written chan struct{}
}

// hold holds the first write of l.session until release, and returns what to call
// once the write returned.
func (l *slowLog) hold(events []messages.Envelope) (done func()) {
	done = func() {}
	if len(events) > 0 && events[0].SessionID == l.session {
		l.once.Do(func() {
			close(l.entered)
			<-l.release
			if l.written != nil {
				done = func() { close(l.written) }
			}
		})
	}
	return done
}

func (l *slowLog) Append(ctx context.Context, events []messages.Envelope) error {
	defer l.hold(events)()
	return l.Log.Append(ctx, events)
}

func (l *slowLog) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	defer l.hold(events)()
	return l.Log.AppendLeased(ctx, lease, events)
}

func (l *slowLog) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	defer l.hold(events)()
	return l.Log.ClaimLeased(ctx, lease, events)
}

// partitionZero is an in-process tasks subscriber whose every message is of
// partition 0 (PartitionReader).
type partitionZero struct{ message.Subscriber }

func (partitionZero) MessagePartition(*message.Message) (int, bool) { return 0, true }

// TestRevokedAnswersTheTasksQueuedAtABusySession: a session's actor is busy (its
// log write hangs) past HandoffGrace with another task of the session queued behind,
// as the tasks handler forwarded it (SubmitTask), when the node's partitions are
// revoked. Revoked stops the actor once the grace is over; the queued task must then
// be answered at once with ErrNotOwner (the partition's next owner reads it again),
// not left to the handler's timeout, holding the partition's tasks meanwhile.
func TestRevokedAnswersTheTasksQueuedAtABusySession(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &slowLog{Log: base, session: "busy", entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(log.release)
		}
	})
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
	// Revoked waits for the busy actor to stop until the end of its budget,
	// shortened here: the write is released once Revoked returned.
	n.revokeWithin = time.Second
	n.Assigned([]int{0}, 1)

	submit := func(input string, timeout time.Duration) *futureResult {
		env, err := n.ingress.Admit(Task{Input: input, SessionID: "busy"})
		if err != nil {
			t.Fatal(err)
		}
		// As handleTask asks.
		f := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, timeout)
		r := &futureResult{done: make(chan struct{})}
		go func() { defer close(r.done); r.res, r.err = f.Result() }()
		return r
	}
	first := submit("first", time.Minute)
	select {
	case <-log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its first task")
	}
	// SubmitTimeout stands for the handler's: without an answer, the future times out.
	queued := submit("second", 20*time.Second)

	revoked := make(chan struct{})
	go func() { defer close(revoked); n.Revoked() }()
	// Revoked returns once it gave up waiting for the busy actor to stop: the
	// actor's Stop is in its mailbox, ahead of the task.
	select {
	case <-revoked:
	case <-time.After(60 * time.Second):
		t.Fatal("Revoked hung")
	}
	released = true
	close(log.release)

	select {
	case <-queued.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the queued task's future hung")
	}
	if queued.err != nil {
		t.Fatalf("the task queued at the stopped session got no answer: %v; want ErrNotOwner", queued.err)
	}
	if e, ok := queued.res.(error); !ok || !errors.Is(e, actors.ErrNotOwner) {
		t.Fatalf("the task queued at the stopped session was answered %v; want ErrNotOwner", queued.res)
	}
	<-first.done
	t.Logf("the busy task was answered %v (%v); the queued one %v", first.res, first.err, queued.res)
}

// futureResult is what a protoactor future resolved to.
type futureResult struct {
	done chan struct{}
	res  any
	err  error
}

// TestRevokedEndsWithinItsBudget: a session's actor is busy (its log write hangs)
// when the node's partitions are revoked, and HandoffGrace is longer than the
// group would wait for the node to rejoin. Revoked gives the session up at the
// end of its budget (revokeBudget, shortened here) and returns while the write
// still hangs: a node still handing over past the group's RebalanceTimeout is
// evicted, and its partitions go to others while it still works on them.
func TestRevokedEndsWithinItsBudget(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &slowLog{Log: base, session: "busy", entered: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(log.release) }) }
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, HandoffGrace: time.Hour,
		Bus: &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	n.revokeWithin = 200 * time.Millisecond
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(release) // before stop: the actor's write ends
	n.Assigned([]int{0}, 1)

	env, err := n.ingress.Admit(Task{Input: "first", SessionID: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	_ = n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, time.Minute) // as handleTask asks
	select {
	case <-log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its task")
	}

	revoked := make(chan struct{})
	go func() { defer close(revoked); n.Revoked() }()
	select {
	case <-revoked:
	case <-time.After(30 * time.Second):
		t.Fatal("Revoked still waits for the busy session (HandoffGrace of an hour) past its budget")
	}
	release()
}
