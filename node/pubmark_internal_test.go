package node

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
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
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	pub := newHeldPublisher(bus)
	clock := &testClock{}
	clock.us.Store(time.Now().UnixMicro())
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, Clock: clock, PublishMarkInterval: -1,
		Bus: &Bus{Publisher: pub, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() { pub.hold(false) }) // before stop: Close publishes what the outbox holds
	owner := func() eventlog.Ownership {
		t.Helper()
		o, err := log.Owners(ctx, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return o[0]
	}

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
