package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// testClock is a clock a test sets.
type testClock struct{ us atomic.Int64 }

func (c *testClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// A session pending (stamping, not handed yet) holds the mark at the earliest time
// its batch may be stamped with, however late the clock; once every session
// handed its batch, the mark is the clock's reading. A round learns whether
// anything was stamped since the last.
func TestPublicationMarksHoldPendingSessions(t *testing.T) {
	clock := &testClock{}
	clock.us.Store(1_000)
	m := publicationMarks{clock: clock}
	low := func(want int64, changed bool) {
		t.Helper()
		if got, ch := m.low(); got != want || ch != changed {
			t.Errorf("low() = %d, %v; want %d, %v", got, ch, want, changed)
		}
	}
	low(1_000, false)
	m.stamping("s", math.MaxInt64)
	clock.us.Store(5_000)
	low(1_000, true)
	low(1_000, false)
	// A batch holding an event stamped before (a tool's result): pending since.
	m.stamping("t", 300)
	m.stamping("t", 4_000) // a retried step keeps the earliest
	low(300, true)
	m.handed("t")
	low(1_000, false)
	m.handed("s")
	low(5_000, false)
}

// A sharded node marks, once the resumption of its lease ended, the time before
// which it published everything; not while the bus holds what its sessions
// appended (a session ended then is not covered), and again once the bus took it;
// not again when nothing was appended since.
func TestPublicationMarkWaitsForTheBus(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	clock := &testClock{}
	clock.us.Store(time.Now().UnixMicro())
	n, pub, owner := startPartitionZeroNode(t, log, log, Config{Clock: clock, PublishMarkInterval: -1})

	if n.markPublished(time.Second) {
		t.Fatal("marked before any assignment")
	}
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the resumption", func() bool { return counterValue(t, n.metrics.resumptions) == 1 })
	if !n.markPublished(10 * time.Second) {
		t.Fatal("no first mark of the lease")
	}
	first := owner().PublishedUS
	if first != clock.us.Load() {
		t.Errorf("first mark %d, want the clock's %d", first, clock.us.Load())
	}
	clock.us.Add(int64(time.Second / time.Microsecond))
	if n.markPublished(10 * time.Second) {
		t.Error("marked again with nothing appended since")
	}

	// The bus holds the session's result: no mark covers it.
	pub.hold(true)
	id, err := n.Submit(ctx, Task{Input: "hello", SessionID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, "the task's end", func() bool {
		st, ok, err := n.Status(ctx, id)
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	ended := clock.us.Load()
	clock.us.Add(int64(time.Minute / time.Microsecond))
	if n.markPublished(100 * time.Millisecond) {
		t.Fatal("marked while the bus held the session's result")
	}
	if o := owner(); o.PublishedUS != first {
		t.Fatalf("owner %+v after a round the bus held; want the mark %d", o, first)
	}

	// The bus takes it: the mark passes the session's end.
	pub.hold(false)
	if !n.markPublished(10 * time.Second) {
		t.Fatal("no mark once the bus took the result")
	}
	if o := owner(); o.PublishedUS <= ended || o.ReleasedUS != 0 {
		t.Errorf("owner %+v; want marked past the session's end %d, not released", o, ended)
	}
}

// Before the resumption of its lease ended, a node marks a partition its previous
// owner released (nothing is owed), marks one its previous owner marked no later
// than that mark less markMargin, and does not mark one its previous owner did
// neither: the sessions that owner left unpublished may not be published yet.
func TestPublicationMarksBeforeTheResumptionEnded(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &listingLog{Log: base, stalled: make(chan struct{}), resume: make(chan struct{})}
	n, _, owner := startPartitionZeroNode(t, log, base, Config{HandoffGrace: 100 * time.Millisecond, PublishMarkInterval: -1})
	// assign takes partition 0 under a new epoch, its resumption stalled.
	assign := func() eventlog.Ownership {
		t.Helper()
		prev := owner().Epoch
		n.Assigned([]int{0}, 1)
		waitWithin(t, 30*time.Second, "the lease", func() bool { return owner().Epoch > prev })
		n.own.mu.Lock()
		resumed := n.own.resumed == n.own.lease.gen
		n.own.mu.Unlock()
		if resumed {
			t.Fatal("the resumption ended; the test needs it stalled")
		}
		return owner()
	}
	log.stall.Store(true)
	t.Cleanup(func() { log.stall.Store(false); close(log.resume) }) // before stop

	// Nobody owned it before: nothing is owed... but nothing says so either.
	assign()
	if n.markPublished(time.Second) {
		t.Fatal("marked a partition nobody released nor marked before its resumption ended")
	}
	if o := owner(); o.PublishedUS != 0 {
		t.Fatalf("owner %+v; want no mark", o)
	}
	// Released by its previous owner: marked.
	n.Revoked()
	if o := owner(); o.ReleasedUS != 0 {
		t.Fatalf("owner %+v: a partition owed everything was released", o)
	}
	prev := owner()
	if err := base.Release(ctx, prev.Node, prev.Epoch, []int{0}, time.Now().UnixMicro()); err != nil {
		t.Fatal(err)
	}
	assign()
	before := time.Now().UnixMicro()
	if !n.markPublished(time.Second) {
		t.Fatal("no mark of a partition its previous owner released")
	}
	if o := owner(); o.PublishedUS < before {
		t.Fatalf("owner %+v; want a mark at the clock's reading, at least %d", o, before)
	}
	// Marked by its previous owner: marked at that mark less the margin.
	n.Revoked()
	prev = owner()
	if prev.ReleasedUS == 0 {
		t.Fatalf("owner %+v; want released (its previous owner had released it)", prev)
	}
	// The record released is read as released: mark the next as a dead owner would.
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the lease", func() bool { return owner().Epoch > prev.Epoch })
	dead := owner()
	mark := time.Now().Add(-time.Minute).UnixMicro()
	if err := base.MarkPublished(ctx, dead.Node, dead.Epoch, []int{0}, mark); err != nil {
		t.Fatal(err)
	}
	n.own.mu.Lock()
	n.own.handedOver = dead.Epoch // as if its owner died: no hand-over of this lease
	n.own.mu.Unlock()
	n.Revoked()
	assign()
	if !n.markPublished(time.Second) {
		t.Fatal("no mark of a partition its previous owner marked")
	}
	if o, want := owner(), mark-markMargin.Microseconds(); o.PublishedUS != want {
		t.Fatalf("owner %+v; want marked at %d (the previous mark less the margin)", o, want)
	}
}

// A session whose write the log refuses as fenced (another node took its partition
// under a later epoch) stops, and its batch is the new owner's to publish: it holds
// the node's publication mark back no more. Before, it stayed pending for as long
// as the node ran, and every later mark stayed before it: after a crash, the
// node's next owner published again every session that ended since.
func TestPublicationMarkPassesAFencedWrite(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	clock := &testClock{}
	clock.us.Store(time.Now().UnixMicro())
	n, _, owner := startPartitionZeroNode(t, log, log, Config{Clock: clock, PublishMarkInterval: -1, HandoffGrace: 100 * time.Millisecond})
	resumptions := func() float64 { return counterValue(t, n.metrics.resumptions) }
	minute := int64(time.Minute / time.Microsecond)

	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the first resumption", func() bool { return resumptions() == 1 })
	if !n.markPublished(10 * time.Second) {
		t.Fatal("no first mark of the lease")
	}

	// Node b takes partition 0: the next write of a's session is refused.
	if _, _, err := log.TakeOver(ctx, "b", []int{0}); err != nil {
		t.Fatal(err)
	}
	env, err := n.ingress.Admit(Task{Input: "hello", SessionID: "fenced"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 30*time.Second).Result()
	if e, _ := res.(error); err != nil || !errors.Is(e, eventlog.ErrFenced) {
		t.Fatalf("the task's write was answered %v, %v; want ErrFenced", res, err)
	}
	fencedAt := clock.us.Load()

	// Kafka gives partition 0 back to a, under an epoch above b's, and a session
	// of it runs a task to its end.
	clock.us.Add(minute)
	n.Revoked()
	b := owner()
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the second resumption", func() bool { return resumptions() == 2 })
	if o := owner(); o.Node != "a" || o.Epoch <= b.Epoch {
		t.Fatalf("owner %+v; want a, above b's %+v", o, b)
	}
	id, err := n.Submit(ctx, Task{Input: "hello", SessionID: "later"})
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, "the later task's end", func() bool {
		st, ok, err := n.Status(ctx, id)
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	ended := clock.us.Load()
	clock.us.Add(minute)
	if !n.markPublished(10 * time.Second) {
		t.Fatal("no mark of the new lease")
	}
	if o := owner(); o.PublishedUS <= ended {
		t.Errorf("owner %+v: marked at %d, before the later session's end %d (the fenced write was at %d); want the clock's %d",
			o, o.PublishedUS, ended, fencedAt, clock.us.Load())
	}
}

// A session stopped while it retried a write (errStopped: its partition revoked,
// or the node closing) stops with its batch pending: its actor never takes the
// next step that would end it. The hand-over reads it (see
// TestHandOverMarksASessionStoppedMidWrite); after it, it holds the node's later
// marks back no more. Before, it stayed pending for as long as the node ran, and
// every mark of the partitions the node took later stayed before it: after a crash,
// their next owner published again every session that ended since.
func TestPublicationMarkPassesASessionStoppedMidWrite(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &downLog{Log: base, session: "stuck", entered: make(chan struct{})}
	clock := &testClock{}
	clock.us.Store(time.Now().UnixMicro())
	n, _, owner := startPartitionZeroNode(t, log, base, Config{Clock: clock, PublishMarkInterval: -1, HandoffGrace: 100 * time.Millisecond})
	resumptions := func() float64 { return counterValue(t, n.metrics.resumptions) }
	minute := int64(time.Minute / time.Microsecond)

	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the first resumption", func() bool { return resumptions() == 1 })

	// The log is down for a session: it retries its task's write until the
	// partition is revoked, and stops.
	env, err := n.ingress.Admit(Task{Input: "hello", SessionID: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	f := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 30*time.Second)
	select {
	case <-log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its task")
	}
	stuckAt := clock.us.Load()
	clock.us.Add(minute)
	n.Revoked()
	if res, err := f.Result(); err != nil {
		t.Fatal(err)
	} else if e, _ := res.(error); !errors.Is(e, actors.ErrNotOwner) {
		t.Fatalf("the task being written was answered %v; want ErrNotOwner", res)
	}

	// The partition comes back, and a session of it runs a task to its end.
	clock.us.Add(minute)
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the second resumption", func() bool { return resumptions() == 2 })
	id, err := n.Submit(ctx, Task{Input: "hello", SessionID: "later"})
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, "the later task's end", func() bool {
		st, ok, err := n.Status(ctx, id)
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	ended := clock.us.Load()
	clock.us.Add(minute)
	if !n.markPublished(10 * time.Second) {
		t.Fatal("no mark of the new lease")
	}
	if o := owner(); o.PublishedUS <= ended {
		t.Errorf("owner %+v: marked at %d, before the later session's end %d (the stopped write was at %d); want the clock's %d",
			o, o.PublishedUS, ended, stuckAt, clock.us.Load())
	}
}

// landedLog is a SQLite log that, for one session, writes the batch that ends its
// task and answers with an error all the same (a timeout after the log took it),
// then is down for the session until up is called.
type landedLog struct {
	*sqlite.Log
	session string
	down    atomic.Bool
	once    sync.Once
	landed  chan struct{} // closed once the batch was written
}

func (l *landedLog) write(events []messages.Envelope, write func() error) error {
	if len(events) == 0 || events[0].SessionID != l.session {
		return write()
	}
	if l.down.Load() {
		return errDown
	}
	if !slices.ContainsFunc(events, func(e messages.Envelope) bool { return e.Type == messages.TypeTaskCompleted }) {
		return write()
	}
	if err := write(); err != nil {
		return err
	}
	l.down.Store(true)
	l.once.Do(func() { close(l.landed) })
	return fmt.Errorf("%w: no answer to the write", errDown)
}

func (l *landedLog) up() { l.down.Store(false) }

func (l *landedLog) Append(ctx context.Context, events []messages.Envelope) error {
	return l.write(events, func() error { return l.Log.Append(ctx, events) })
}

func (l *landedLog) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return l.write(events, func() error { return l.Log.AppendLeased(ctx, lease, events) })
}

// A session stopped while it retried a write whose first attempt the log took
// without answering (its task's end) leaves its batch unpublished: the hand-over
// does not release its partition cleanly, but marks it before that batch, and the
// partition's next owner publishes the session's result. Before, the partition was
// released, its next owner published nothing of its ended sessions again, and the
// result never reached troupe.results.
func TestHandOverMarksASessionStoppedMidWrite(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &landedLog{Log: base, session: "stuck", landed: make(chan struct{})}
	n, pub, owner := startPartitionZeroNode(t, log, base, Config{PublishMarkInterval: -1, HandoffGrace: 100 * time.Millisecond})
	resumptions := func() float64 { return counterValue(t, n.metrics.resumptions) }

	sub, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	results, err := pub.Publisher.(*EmbeddedBus).Subscribe(sub, messages.TopicResults)
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Int64
	go func() {
		for m := range results {
			if m.Metadata.Get(messages.MetaSessionID) == "stuck" {
				published.Add(1)
			}
			m.Ack()
		}
	}()

	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the first resumption", func() bool { return resumptions() == 1 })
	before := time.Now().UnixMicro()
	id, err := n.Submit(ctx, Task{Input: "hello", SessionID: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.landed:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its task's end")
	}
	n.Revoked()
	log.up()
	if st, ok, err := n.Status(ctx, id); err != nil || !ok || st.Status != messages.StatusCompleted {
		t.Fatalf("status %+v, %v, %v; want the task completed in the log", st, ok, err)
	}
	if got := published.Load(); got != 0 {
		t.Fatalf("%d results of the stopped session published; want none yet", got)
	}
	if o := owner(); o.ReleasedUS != 0 || o.PublishedUS <= 0 || o.PublishedUS > time.Now().UnixMicro() || o.PublishedUS < before {
		t.Errorf("owner %+v; want marked (at the stopped write, after %d), not released", o, before)
	}

	// The partition's next owner (this node, under a new epoch) publishes it.
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the second resumption", func() bool { return resumptions() == 2 })
	waitWithin(t, 30*time.Second, "the stopped session's result on "+messages.TopicResults, func() bool { return published.Load() == 1 })
}
