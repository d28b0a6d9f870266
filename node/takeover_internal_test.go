package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// racingOwnerLog is a SQLite log on which another node takes partitions the
// first time this node does (Own or TakeOver), before the log records this
// node's epoch: race runs then, once.
type racingOwnerLog struct {
	*sqlite.Log
	once sync.Once
	race func()
}

func (l *racingOwnerLog) Own(ctx context.Context, node string, partitions []int) (uint64, error) {
	l.once.Do(l.race)
	return l.Log.Own(ctx, node, partitions)
}

func (l *racingOwnerLog) TakeOver(ctx context.Context, node string, partitions []int) (uint64, map[int]eventlog.Ownership, error) {
	l.once.Do(l.race)
	return l.Log.TakeOver(ctx, node, partitions)
}

// A node taking a partition over decides what to publish again from the owner
// its epoch replaced, not from an earlier read of the partition's owner. Here
// node c released partition 0 cleanly; as node a is assigned it, node b (which
// believes it owns it too: evicted while it hung, or a takeover racing a
// rebalance) takes it first, ends a session under its lease and dies without
// releasing it or publishing the result. Node a must publish that result: had it
// trusted c's clean release, read before b took the partition, nobody would.
func TestTakeOverRepublishesWhatAnOwnerInBetweenLeft(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	ec, err := base.Own(ctx, "c", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if err := base.Release(ctx, "c", ec, []int{0}, time.Now().UnixMicro()); err != nil {
		t.Fatal(err)
	}

	const session = "ended-in-between"
	raced := make(chan error, 1)
	log := &racingOwnerLog{Log: base, race: func() {
		raced <- func() error {
			eb, err := base.Own(ctx, "b", []int{0})
			if err != nil {
				return err
			}
			now := time.Now().UnixMicro()
			var events []messages.Envelope
			for i, p := range []messages.Payload{
				&messages.TaskSubmitted{Input: "What is 2 + 2?"},
				&messages.TaskCompleted{Output: "4", Steps: 1},
			} {
				e, err := messages.NewEnvelope(p)
				if err != nil {
					return err
				}
				seq := uint64(i + 1)
				e.ID, e.SessionID, e.Seq, e.TS, e.Actor, e.CorrelationID = fmt.Sprintf("%s/%d", session, seq), session, seq, now+int64(seq), "session", session+"/1"
				events = append(events, e)
			}
			return base.AppendLeased(ctx, eventlog.Lease{Partition: 0, Epoch: eb}, events) // and b dies
		}()
	}}
	n, pub, owner := startPartitionZeroNode(t, log, base, Config{})
	if o := owner(); o.Node != "c" || o.ReleasedUS == 0 {
		t.Fatalf("before the assignment: owner %+v; want c, released", o)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	results, err := pub.Publisher.(*EmbeddedBus).Subscribe(sctx, messages.TopicResults)
	if err != nil {
		t.Fatal(err)
	}

	n.Assigned([]int{0}, 1)
	select {
	case err := <-raced:
		if err != nil {
			t.Fatalf("node b's takeover: %v", err)
		}
	default:
		t.Fatal("the node took the partition without the log's Own or TakeOver")
	}
	if o := owner(); o.Node != "a" {
		t.Fatalf("after the assignment: owner %+v; want a", o)
	}
	for {
		select {
		case m := <-results:
			m.Ack()
			var r messages.TaskResult
			if err := json.Unmarshal(m.Payload, &r); err != nil {
				t.Fatal(err)
			}
			if r.SessionID != session {
				continue
			}
			if r.Status != messages.StatusCompleted || r.Output != "4" {
				t.Fatalf("the result published again: %+v; want completed, 4", r)
			}
			if got := counterValue(t, n.metrics.republished); got != 1 {
				t.Errorf("troupe_cluster_ended_sessions_republished_total = %v, want 1", got)
			}
			return
		case <-sctx.Done():
			n.own.mu.Lock()
			released := n.own.released
			n.own.mu.Unlock()
			t.Fatalf("the result of session %s, ended by node b after node c released the partition, never reached %s (partitions taken as released cleanly: %v)",
				session, messages.TopicResults, released)
		}
	}
}
