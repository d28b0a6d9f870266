package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// heldPublisher is a bus publisher that holds what sessions publish (every topic
// but troupe.tasks) while held is set, as a broker outage does, and lets it through
// once it is cleared.
type heldPublisher struct {
	message.Publisher
	mu     sync.Mutex
	held   bool
	opened *sync.Cond
}

func newHeldPublisher(p message.Publisher) *heldPublisher {
	h := &heldPublisher{Publisher: p}
	h.opened = sync.NewCond(&h.mu)
	return h
}

func (h *heldPublisher) hold(on bool) {
	h.mu.Lock()
	h.held = on
	h.mu.Unlock()
	h.opened.Broadcast()
}

func (h *heldPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic != messages.TopicTasks {
		h.mu.Lock()
		for h.held {
			h.opened.Wait()
		}
		h.mu.Unlock()
	}
	return h.Publisher.Publish(topic, msgs...)
}

// listingLog is a SQLite log whose session listings wait, while stall is set,
// until go is closed: a takeover's resumption that has not finished.
type listingLog struct {
	*sqlite.Log
	stall   atomic.Bool
	stalled chan struct{} // closed when a listing waits
	once    sync.Once
	resume  chan struct{}
}

func (l *listingLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if l.stall.Load() {
		l.once.Do(func() { close(l.stalled) })
		<-l.resume
	}
	return l.Log.Sessions(ctx, f)
}

// counterValue is the value of c.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waitWithin waits, up to within, for cond.
func waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startPartitionZeroNode starts node "a", sharded over one partition of an
// in-process bus, behind a publisher a test can hold, on log (base, or a wrapper
// of it), with cfg's other settings and cfg's model, or else a scripted model that
// answers "done". It returns the node, its publisher, and a reader of partition 0's owner record.
func startPartitionZeroNode(t *testing.T, log eventlog.Log, base *sqlite.Log, cfg Config) (*Node, *heldPublisher, func() eventlog.Ownership) {
	t.Helper()
	ctx := context.Background()
	if cfg.Model == nil {
		model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Model = model
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	pub := newHeldPublisher(bus)
	cfg.Log, cfg.NodeID = log, "a"
	cfg.Bus = &Bus{Publisher: pub, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}
	n, err := New(ctx, cfg)
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
		o, err := base.Owners(ctx, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return o[0]
	}
	return n, pub, owner
}

// A node hands its partitions over without marking them released when the bus
// does not take what its sessions handed to the outbox within HandoffGrace, or
// when the resumption of the partitions it took had not finished: their next
// owner must then publish the lately ended sessions again. Once the bus takes
// everything, the hand-over marks them.
func TestHandOverMarksNothingUnlessEverythingWasPublished(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &listingLog{Log: base, stalled: make(chan struct{}), resume: make(chan struct{})}
	n, pub, owner := startPartitionZeroNode(t, log, base, Config{HandoffGrace: 100 * time.Millisecond})
	resumptions := func() float64 { return counterValue(t, n.metrics.resumptions) }
	unreleased := func() float64 { return counterValue(t, n.metrics.unreleased) }

	// The bus holds the session's result: the hand-over cannot flush it.
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the first resumption", func() bool { return resumptions() == 1 })
	pub.hold(true)
	id, err := n.Submit(ctx, Task{Input: "hello", SessionID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, "the task's end", func() bool {
		st, ok, err := n.Status(ctx, id)
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	n.Revoked()
	if o := owner(); o.Node != "a" || o.ReleasedUS != 0 {
		t.Fatalf("after a hand-over whose result the bus held: owner %+v; want a, not released", o)
	}
	if got := unreleased(); got != 1 {
		t.Errorf("troupe_cluster_handovers_unreleased_total = %v, want 1", got)
	}

	// The bus takes everything again: the next hand-over marks the partition.
	pub.hold(false)
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the second resumption", func() bool { return resumptions() == 2 })
	n.Revoked()
	if o := owner(); o.Node != "a" || o.ReleasedUS == 0 {
		t.Fatalf("after a clean hand-over: owner %+v; want released by a", o)
	}

	// A resumption that has not finished when the partitions go, of a partition
	// its previous owner released cleanly: nothing was owed, and everything the
	// node appended is published, so the partition is released all the same (the
	// sessions not resumed are resumed by the next owner).
	log.stall.Store(true)
	n.Assigned([]int{0}, 1)
	t.Cleanup(func() { log.stall.Store(false); close(log.resume) }) // before stop
	select {
	case <-log.stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the resumption never listed the sessions")
	}
	n.Revoked()
	if o := owner(); o.Node != "a" || o.ReleasedUS == 0 {
		t.Fatalf("after a hand-over before the resumption of a cleanly released partition finished: owner %+v; want released by a", o)
	}
	if got := unreleased(); got != 1 {
		t.Errorf("troupe_cluster_handovers_unreleased_total = %v, want 1", got)
	}

	// Its bus held again: not released (the resumption stalls from now on).
	pub.hold(true)
	n.Assigned([]int{0}, 1)
	id, err = n.Submit(ctx, Task{Input: "hello", SessionID: "held-again"})
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, "the second task's end", func() bool {
		st, ok, err := n.Status(ctx, id)
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	n.Revoked()
	unclean := owner()
	if unclean.ReleasedUS != 0 || unclean.PublishedUS != 0 {
		t.Fatalf("after a hand-over whose result the bus held: owner %+v; want neither released nor marked", unclean)
	}
	pub.hold(false)

	// A resumption that has not finished, of a partition its previous owner
	// neither released nor marked: what that owner left may still be unpublished,
	// so the partition is neither released nor marked.
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the lease", func() bool { return owner().Epoch > unclean.Epoch })
	n.Revoked()
	if o := owner(); o.ReleasedUS != 0 || o.PublishedUS != 0 {
		t.Fatalf("after a hand-over before the resumption of an unreleased, unmarked partition finished: owner %+v; want neither released nor marked", o)
	}

	// Of a partition its previous owner marked: marked no later than that mark
	// (less markMargin), since the sessions that ended after it may be owed still.
	prev := owner()
	mark := time.Now().Add(-time.Minute).UnixMicro()
	if err := base.MarkPublished(ctx, prev.Node, prev.Epoch, []int{0}, mark); err != nil {
		t.Fatal(err)
	}
	n.Assigned([]int{0}, 1)
	waitWithin(t, 30*time.Second, "the lease", func() bool { return owner().Epoch > prev.Epoch })
	n.Revoked()
	if o := owner(); o.ReleasedUS != 0 || o.PublishedUS != mark-markMargin.Microseconds() {
		t.Fatalf("after a hand-over before the resumption of a marked partition finished: owner %+v; want marked at %d (the previous mark less the margin), not released",
			o, mark-markMargin.Microseconds())
	}
}
