package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// frozenAfterRequestLog is a SQLite log that, the first time it stores a batch
// holding a model call's request, holds the append's return until thaw is
// closed: the batch is durable, and the session has not issued the call yet, as
// in a process stopped (SIGSTOP) right after its append was answered.
type frozenAfterRequestLog struct {
	*sqlite.Log
	once   sync.Once
	frozen chan struct{} // closed once the request is stored and the append held
	thaw   chan struct{}
}

func (l *frozenAfterRequestLog) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	err := l.Log.AppendLeased(ctx, lease, events)
	l.freeze(err, events)
	return err
}

func (l *frozenAfterRequestLog) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	err := l.Log.ClaimLeased(ctx, lease, events)
	l.freeze(err, events)
	return err
}

func (l *frozenAfterRequestLog) freeze(err error, events []messages.Envelope) {
	if err != nil {
		return
	}
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			l.once.Do(func() {
				close(l.frozen)
				<-l.thaw
			})
			return
		}
	}
}

// keysModel answers every call with the script's step, and records the keys of
// the calls it was asked.
type keysModel struct {
	llm.Model
	mu   sync.Mutex
	keys []string
}

func (m *keysModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.keys = append(m.keys, r.Key)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func (m *keysModel) called() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.keys...)
}

// pausedNode starts a sharded node, owner of partition 0 (every session's), on
// a log that freezes it once a session's model call is requested (durably) and not
// yet issued; it returns the node, its model, and the log.
func pausedNode(t *testing.T) (*Node, *keysModel, *frozenAfterRequestLog) {
	t.Helper()
	ctx := context.Background()
	base := tempSQLite(t)
	log := &frozenAfterRequestLog{Log: base, frozen: make(chan struct{}), thaw: make(chan struct{})}
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	model := &keysModel{Model: script}
	n, _, _ := startPartitionZeroNode(t, log, base, Config{Model: model, HandoffGrace: 100 * time.Millisecond})
	t.Cleanup(func() {
		select {
		case <-log.thaw:
		default:
			close(log.thaw)
		}
	})
	n.Assigned([]int{0}, 1)
	submitted := make(chan error, 1)
	go func() {
		// Answered once the task is recorded, in the batch that freezes.
		_, err := n.Submit(ctx, Task{Input: "hello", SessionID: "s-1", TaskID: "t-1"})
		submitted <- err
	}()
	select {
	case <-log.frozen:
	case err := <-submitted:
		t.Fatalf("the task was answered before its session requested a model call: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the session never requested its model call")
	}
	return n, model, log
}

// pauseFor moves the node's pause watch (pausewatch.go) d ahead, as if the
// process had been stopped for d.
func (n *Node) pauseFor(d time.Duration) {
	n.pauses.mu.Lock()
	defer n.pauses.mu.Unlock()
	n.pauses.clock() // sets now, if it was not
	now := n.pauses.now
	n.pauses.now = func() time.Time { return now().Add(d) }
}

// A node frozen past the group's session timeout right after its session's model
// call was requested (durably) and before the call started, whose partition
// another node took meanwhile (the new owner's epoch is in the log, and that
// owner performs the call under its key), must not start the call when it wakes:
// it learns of its eviction only at its next heartbeat, a second later. Found on a
// real cluster (TestClusterPausedNodePerformsNoEffectOfSessionsItLost): the woken
// node started one model call of a session the new owner had taken over and
// performed under the same key. Now the node sees the gap on its monotonic clock,
// doubts its ownership, and reads the partition's epoch in the log before the
// call starts: another node's, so the call is dropped unstarted.
func TestPausedNodeStartsNoCallOfASessionItLost(t *testing.T) {
	n, model, log := pausedNode(t)
	epoch, err := log.Log.Own(context.Background(), "b", []int{0}) // b takes partition 0 while a sleeps
	if err != nil {
		t.Fatal(err)
	}
	n.pauseFor(11 * time.Second) // the group's session timeout, and a second
	n.keepAfter(100 * time.Millisecond)
	close(log.thaw) // a wakes up
	waitFor(t, "the call started, or refused", func() bool {
		return len(model.called()) > 0 || counterValue(t, n.metrics.fenced) >= 1
	})
	if keys := model.called(); len(keys) > 0 {
		t.Fatalf("after its pause, node a performed the model calls %q of the session node b took over (epoch %d) and performs under the same key", keys, epoch)
	}
}

// A pause past doubtAfter and short of the group's session timeout, with no
// other node taking the partition meanwhile: the node confirms in the log that it
// still owns it, and the call starts.
func TestPausedNodeStillOwningItsPartitionGoesOn(t *testing.T) {
	n, model, log := pausedNode(t)
	n.pauseFor(6 * time.Second)
	close(log.thaw)
	waitFor(t, "the call performed", func() bool { return len(model.called()) > 0 })
	if got := counterValue(t, n.metrics.fenced); got != 0 {
		t.Fatalf("%v calls refused as fenced, want none: the node still owns its partition", got)
	}
	if _, doubt, _ := n.pauses.doubts(0); doubt {
		t.Error("the node still doubts its ownership of partition 0, which the log confirmed")
	}
}

// A pause of the group's session timeout or more: the group evicted the node,
// and the partition's new owner records its epoch only once its rebalance is
// done, seconds later. Before, the node woken in between read its own epoch still
// current in the log, and started the call the new owner was about to perform
// under the same key. Now it starts no call until it is assigned the partition
// again (a new lease), and then the session goes on.
func TestPausedNodeEvictedStartsNoCallUntilAssignedAgain(t *testing.T) {
	n, model, log := pausedNode(t)
	n.pauseFor(11 * time.Second) // no other node's epoch in the log yet
	n.keepAfter(time.Hour)       // the group's revoke comes first
	close(log.thaw)
	waitFor(t, "the call started, or held", func() bool {
		return len(model.called()) > 0 || gaugeValue(t, n.metrics.awaitingOwnership) >= 1
	})
	if keys := model.called(); len(keys) > 0 {
		t.Fatalf("after a pause past the group's session timeout, node a started the model calls %q before it was assigned its partition again", keys)
	}
	// The group's rebalance, as the node rejoins: its sessions are handed over,
	// and the partition is given back to it under a new lease.
	n.Revoked()
	n.Assigned([]int{0}, 1)
	waitFor(t, "the call performed once the partition was assigned again", func() bool { return len(model.called()) > 0 })
	if _, _, lost := n.pauses.doubts(0); lost {
		t.Error("the node still counts partition 0 lost, which it was assigned again")
	}
}

// A pause of evictedAfter or more that the group did not count against the node
// (it stayed under the session timeout since the node's last heartbeat): no
// revoke comes. Before, the node's calls failed until an assignment that never
// came, and its sessions waited on them for ever; now the calls wait keptAfter
// for a revoke, then the log confirms the partition, and they start.
func TestPausedNodeTheGroupKeptGoesOn(t *testing.T) {
	n, model, log := pausedNode(t)
	n.pauseFor(evictedAfter + 500*time.Millisecond)
	n.keepAfter(200 * time.Millisecond)
	close(log.thaw)
	waitFor(t, "the call performed", func() bool { return len(model.called()) > 0 })
	if got := counterValue(t, n.metrics.fenced); got != 0 {
		t.Fatalf("%v calls refused as fenced, want none: the group kept the node", got)
	}
	if _, doubt, lost := n.pauses.doubts(0); doubt || lost {
		t.Errorf("partition 0 still in doubt (%v) or lost (%v), which the group kept and the log confirmed", doubt, lost)
	}
}

// keepAfter sets how long after a pause of evictedAfter or more the node waits
// for a revoke before it counts itself kept by the group.
func (n *Node) keepAfter(d time.Duration) {
	n.pauses.mu.Lock()
	defer n.pauses.mu.Unlock()
	n.pauses.keptAfter = d
}

// The node's pause watch counts a node evicted from the groups its kafka
// clients build.
func TestPauseWatchKnowsTheNodeGroupsTimeouts(t *testing.T) {
	if groupSessionTimeout != kafka.NodeSessionTimeout || groupHeartbeat != kafka.NodeHeartbeat || groupRebalanceTimeout != kafka.NodeRebalanceTimeout {
		t.Fatalf("the pause watch's session timeout, heartbeat and rebalance timeout are %v, %v and %v, a node's groups' %v, %v and %v",
			groupSessionTimeout, groupHeartbeat, groupRebalanceTimeout, kafka.NodeSessionTimeout, kafka.NodeHeartbeat, kafka.NodeRebalanceTimeout)
	}
}

// leasedNode starts a sharded node on a SQLite log, owner of partition 0 (every
// session's) under a lease.
func leasedNode(t *testing.T) *Node {
	t.Helper()
	return leasedNodeOn(t, func(l *sqlite.Log) eventlog.Log { return l })
}

// tempSQLite opens a SQLite log in a directory of the test's, closed once the
// test ends.
func tempSQLite(t *testing.T) *sqlite.Log {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// leasedNodeOn is leasedNode on the log wrap makes of a SQLite log.
func leasedNodeOn(t *testing.T, wrap func(*sqlite.Log) eventlog.Log) *Node {
	t.Helper()
	base := tempSQLite(t)
	n, _, _ := startPartitionZeroNode(t, wrap(base), base, Config{HandoffGrace: 100 * time.Millisecond})
	n.Assigned([]int{0}, 1)
	if _, ok := n.ownedLease("s-1"); !ok {
		t.Fatal("the node holds no lease of partition 0 once assigned it")
	}
	return n
}

// A call of a session requested under the node's lease, which the node gave up
// and took again under a new one before the call started (it waited in its
// performer's queue: session actors leave their calls behind as they stop), does
// not start: the session that asked for it stopped, and the partition's owner in
// between performed it under its key. Before, the check asked only whether the
// node owned the session's partition, which it did again.
func TestCallOfAnEarlierLeaseDoesNotStart(t *testing.T) {
	n := leasedNode(t)
	check := n.claimCall("s-1") // requested, then queued
	n.Revoked()
	n.Assigned([]int{0}, 1) // the partition back, under a new lease
	if err := check(context.Background()); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("a call requested under the node's earlier lease was let start under its new one (%v)", err)
	}
	if err := n.claimCall("s-1")(context.Background()); err != nil {
		t.Fatalf("a call requested under the node's new lease was refused: %v", err)
	}
}

// A call of a session requested under the node's lease does not start once the
// lease's sessions were handed over (drainSessions), although the node keeps the
// lease until it recorded their release: the session that asked for it stopped,
// and the partition's next owner performs it.
func TestCallOfHandedOverSessionsDoesNotStart(t *testing.T) {
	n := leasedNode(t)
	check := n.claimCall("s-1") // requested, then queued
	if _, err := n.drainSessions(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.leaseOf("s-1"); !ok {
		t.Fatal("the node no longer holds its lease after the drain: the test would not tell")
	}
	if err := check(context.Background()); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("a call of a session handed over was let start under the lease kept for the release (%v)", err)
	}
}

// heldEpochLog is a SQLite log whose reads of a partition's current epoch wait
// for release once held is set, and are counted.
type heldEpochLog struct {
	*sqlite.Log
	held    atomic.Bool
	release chan struct{}
	reads   atomic.Int64
}

func (l *heldEpochLog) CurrentEpoch(ctx context.Context, partition int) (uint64, error) {
	if l.held.Load() {
		l.reads.Add(1)
		select {
		case <-l.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return l.Log.CurrentEpoch(ctx, partition)
}

// heldEpochNode is leasedNode on a heldEpochLog, returned with it.
func heldEpochNode(t *testing.T) (*Node, *heldEpochLog) {
	t.Helper()
	var log *heldEpochLog
	n := leasedNodeOn(t, func(l *sqlite.Log) eventlog.Log {
		log = &heldEpochLog{Log: l, release: make(chan struct{})}
		return log
	})
	return n, log
}

// After a pause, the calls of one partition that doubt the node's ownership wait
// for one read of its epoch in the log, not one each: before, as many read at
// once as calls waited through the pause, each holding its performer's slot.
func TestPausedNodeConfirmsAPartitionWithOneRead(t *testing.T) {
	n, log := heldEpochNode(t)
	const calls = 4
	checks := make([]func(context.Context) error, calls)
	for i := range checks {
		checks[i] = n.claimCall(fmt.Sprintf("s-%d", i))
	}
	log.held.Store(true)
	n.pauseFor(6 * time.Second)
	done := make(chan error, calls)
	for _, check := range checks {
		go func() { done <- check(context.Background()) }()
	}
	waitFor(t, "every call waiting for the confirmation", func() bool {
		return gaugeValue(t, n.metrics.awaitingOwnership) == calls
	})
	close(log.release)
	for range calls {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a call of the partition the log confirmed was refused: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a call still waits for the confirmation")
		}
	}
	if got := log.reads.Load(); got != 1 {
		t.Fatalf("the log was read %d times to confirm partition 0 for %d calls, want once", got, calls)
	}
}

// gaugeValue is the value of g.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// A call that waits, after a pause, for the log to confirm its lease's epoch must
// not start once the lease's sessions were handed over meanwhile: the epoch the
// read returns is still the node's (the next owner takes the partition only once
// the revoke is done). Before, the lease was checked once, before the read.
func TestCallConfirmedAfterItsSessionsWereHandedOverDoesNotStart(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		t.Run(map[bool]string{false: "drained", true: "revoked"}[revoke], func(t *testing.T) {
			n, log := heldEpochNode(t)
			check := n.claimCall("s-1")
			log.held.Store(true)
			n.pauseFor(6 * time.Second)
			done := make(chan error, 1)
			go func() { done <- check(context.Background()) }()
			waitFor(t, "the call waiting for the log", func() bool { return gaugeValue(t, n.metrics.awaitingOwnership) == 1 })
			if revoke {
				n.Revoked()
			} else if _, err := n.drainSessions(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			close(log.release)
			if err := <-done; !errors.Is(err, eventlog.ErrFenced) {
				t.Fatalf("the call's check after its lease's sessions were handed over: %v, want ErrFenced", err)
			}
		})
	}
}
