package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// lateParentsBlipLog is a log whose listings of the sessions updated lately, of
// any status and without a bound (the failed parents of recent sub-agents:
// lateanswers.go), fail their next left times, as ClickHouse does while it
// restarts; failed counts those that failed.
type lateParentsBlipLog struct {
	eventlog.Log
	mu           sync.Mutex
	left, failed int
}

func (l *lateParentsBlipLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	// The resumption of a partition's lately ended sessions lists those of the
	// last 10 minutes the same way; the failed parents' listing looks an hour back.
	if f.UpdatedSinceUS > 0 && f.UpdatedSinceUS < time.Now().Add(-30*time.Minute).UnixMicro() && f.Status == "" && f.Limit == 0 {
		l.mu.Lock()
		fail := l.left > 0
		if fail {
			l.left--
			l.failed++
		}
		l.mu.Unlock()
		if fail {
			return nil, errors.New("clickhouse: read: i/o timeout")
		}
	}
	return l.Log.Sessions(ctx, f)
}

// TestAFailedParentGetsItsChildsEndAfterAListingBlip: as
// TestDelegateLateAnswerIsRecordedAfterARestart, but the next node starts while
// its log blips: its listing of the failed parents of recent sub-agents fails a
// few times. The listing is retried, and the child's end is recorded on its
// parent's task. Before, the failed listing was logged and the parent never
// woken: the child's spend was never counted in its parent's figures.
func TestAFailedParentGetsItsChildsEndAfterAListingBlip(t *testing.T) {
	lateEndAfterAListingBlip(t, func(t *testing.T, log eventlog.Log, cfg node.Config) {
		_, stop := startOn(t, log, cfg)
		t.Cleanup(stop)
	})
}

// TestAFailedParentGetsItsChildsEndAfterAListingBlipOnAssignment: the same on a
// sharded node, whose listing of the failed parents follows its assignment of
// the partition (resumeOwned). Its clock runs 20 minutes ahead: the parent
// ended before the window of the lately ended sessions it resumes (and publishes
// again: republishWindow), so the listing of the failed parents is the only one
// to wake it.
func TestAFailedParentGetsItsChildsEndAfterAListingBlipOnAssignment(t *testing.T) {
	lateEndAfterAListingBlip(t, func(t *testing.T, log eventlog.Log, cfg node.Config) {
		clock := &shiftedClock{}
		clock.shift.Store(int64(20 * time.Minute))
		cfg.Clock = clock
		bus := node.NewEmbeddedBus(watermill.NopLogger{})
		t.Cleanup(func() { _ = bus.Close() })
		cfg.Log, cfg.DataDir, cfg.NodeID = log, t.TempDir(), "b"
		cfg.Bus = &node.Bus{Publisher: bus, Tasks: onePartition{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}
		n, stop := nodetest.StartWithStop(t, cfg)
		t.Cleanup(stop)
		n.Assigned([]int{0}, 1)
	})
}

// lateEndAfterAListingBlip leaves a failed parent whose child's end is not
// recorded on it, then starts a node with start on a log whose listing of the
// failed parents of recent sub-agents fails three times, and waits for the
// child's end to be recorded on its parent's task.
func lateEndAfterAListingBlip(t *testing.T, start func(*testing.T, eventlog.Log, node.Config)) {
	model, log, key, _ := failedParentMissingItsChildsEnd(t)

	blip := &lateParentsBlipLog{Log: log, left: 3}
	start(t, blip, subagentsConfig(model))
	waitFor(t, 30*time.Second, "the child's end recorded on its parent's task after the blip", func() bool {
		return len(lateAnswers(t, readAll(t, log, "boss"), key)) > 0
	})
	blip.mu.Lock()
	defer blip.mu.Unlock()
	if blip.failed != 3 {
		t.Errorf("the listing failed %d times, want the blip's 3", blip.failed)
	}
}
