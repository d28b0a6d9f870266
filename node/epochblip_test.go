package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// epochBlipLog is a SQLite log whose reads of a partition's current epoch
// (eventlog.EpochReading) fail its next left times, as ClickHouse does while it
// restarts, then succeed; calls counts them.
type epochBlipLog struct {
	*sqlite.Log
	mu    sync.Mutex
	left  int
	calls int
	// sessionsLeft are the next Sessions calls that fail.
	sessionsLeft int
}

func (l *epochBlipLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	l.mu.Lock()
	fail := l.sessionsLeft > 0
	if fail {
		l.sessionsLeft--
	}
	l.mu.Unlock()
	if fail {
		return nil, errors.New("clickhouse: read: i/o timeout")
	}
	return l.Log.Sessions(ctx, f)
}

func (l *epochBlipLog) CurrentEpoch(ctx context.Context, partition int) (uint64, error) {
	l.mu.Lock()
	l.calls++
	fail := l.left > 0
	if fail {
		l.left--
	}
	l.mu.Unlock()
	if fail {
		return 0, errors.New("clickhouse: dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return l.Log.CurrentEpoch(ctx, partition)
}

func (l *epochBlipLog) count() (calls, left int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls, l.left
}

// TestASessionResumedDuringAnEpochBlipWaitsForTheLog: a sharded node's session has
// a model call in flight when its partition is revoked; assigned the partition
// again, the node resumes the session, whose start checks that the node still owns
// the partition (its current epoch in the log). ClickHouse blips: the check fails
// more times in a row than the supervisor restarts the actor (5 in 10 s). The
// session waits for the log, then re-issues its call (which joins the one in
// flight, answered once the blip is over) and completes its task. Before, each
// failed check panicked the actor; its supervisor gave it up, and the task stayed
// unfinished until another message reached the session.
func TestASessionResumedDuringAnEpochBlipWaitsForTheLog(t *testing.T) {
	resumedDuringABlip(t, func(l *epochBlipLog) { l.left = 6 })
}

// TestASessionIsResumedAfterAListingBlip: as above, but the blip meets the
// node's listing of the sessions to resume (eventlog.Log.Sessions) as it is
// assigned the partition: the listing is retried, and the session resumed.
// Before, the failed listing was logged and nothing resumed: the task stayed
// unfinished until another message reached its session.
func TestASessionIsResumedAfterAListingBlip(t *testing.T) {
	resumedDuringABlip(t, func(l *epochBlipLog) { l.sessionsLeft = 3 })
}

func resumedDuringABlip(t *testing.T, arm func(*epochBlipLog)) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &epochBlipLog{Log: base}
	n, open := startGatedShardedNode(t, log)

	n.Revoked() // the session stops with its call in flight
	log.mu.Lock()
	arm(log)
	failures := log.left
	log.mu.Unlock()
	n.Assigned([]int{0}, 1) // resumes the session, which meets the blip
	// The call in flight answers once the blip is over: to the resumed session,
	// whose call of the same key joins it, if it waited for the log.
	waitFor(t, 30*time.Second, "the blip is over", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.left == 0 && log.sessionsLeft == 0 && log.calls > 0
	})
	open()
	waitFor(t, 60*time.Second, "the resumed session completes its task", func() bool {
		st, ok, err := n.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	if calls, left := log.count(); left != 0 || calls < failures+1 {
		t.Errorf("the current epoch was read %d times (%d failures left); want the %d failures, then a success", calls, left, failures)
	}
}

// startGatedShardedNode starts node "a" on log, sharded on an embedded bus whose
// every task is of partition 0, and assigns it that partition; it submits "hello"
// to session s-1 and returns once the node's model is called, the call held until
// open is called (or the test ends).
func startGatedShardedNode(t *testing.T, log eventlog.Log) (n *node.Node, open func()) {
	t.Helper()
	scripted, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}, {Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	gated := &gatedModel{Model: scripted, started: make(chan struct{}), gate: make(chan struct{}), calls: make(chan struct{}, 1)}
	gated.calls <- struct{}{}
	var once sync.Once
	open = func() { once.Do(func() { close(gated.gate) }) }
	t.Cleanup(open)
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, stop := nodetest.StartWithStop(t, node.Config{
		Log: log, NodeID: "a", Model: gated, HandoffGrace: 50 * time.Millisecond,
		Bus: &node.Bus{Publisher: bus, Tasks: onePartition{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }},
	})
	t.Cleanup(stop)
	n.Assigned([]int{0}, 1)
	if _, err := n.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the node never called its model")
	}
	return n, open
}

// TestAnEmbeddedNodeResumesAfterAListingBlip: a node that starts while its log
// blips (its listing of the unfinished sessions to resume fails a few times)
// retries the listing, and resumes the task its previous run left in flight.
// Before, the failed listing was logged and nothing was resumed: the task stayed
// unfinished until another message reached its session.
func TestAnEmbeddedNodeResumesAfterAListingBlip(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &epochBlipLog{Log: base}
	scripted := func() llm.Model {
		m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gated := &gatedModel{Model: scripted(), started: make(chan struct{}), gate: make(chan struct{}), calls: make(chan struct{}, 1)}
	gated.calls <- struct{}{}
	t.Cleanup(func() { close(gated.gate) })
	first, stop := nodetest.StartWithStop(t, node.Config{Log: log, Model: gated, HandoffGrace: 50 * time.Millisecond})
	if _, err := first.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the node never called its model")
	}
	stop() // the task is left in flight

	log.mu.Lock()
	log.sessionsLeft = 3
	log.mu.Unlock()
	second := nodetest.Start(t, node.Config{Log: log, Model: scripted()})
	waitFor(t, 60*time.Second, "the restarted node completes the task", func() bool {
		st, ok, err := second.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
}
