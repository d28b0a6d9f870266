package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/messages"
)

// An embedded node's session passivated after a long history saves a fold
// snapshot in the SQLite log, through the wrappers of the node's session store
// (SessionDeps.Snapshots), and its next task, folded from it, runs.
func TestPassivatedSessionSavesAFoldSnapshot(t *testing.T) {
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer start()
	passivatedSessionSavesAFoldSnapshot(t, n)
}

// A node on the ClickHouse log (as `node serve --clickhouse`, a cluster's nodes)
// does the same through the ClickHouse log's fold snapshots.
//
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9000 go test ./node -run TestPassivatedSessionSavesAFoldSnapshotOnClickHouse -count=1
func TestPassivatedSessionSavesAFoldSnapshotOnClickHouse(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set (see deploy/clickhouse.sh)")
	}
	lg, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr),
		Database: chtest.Database(t, addr, "troupe_test_"), FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	n, err := New(context.Background(), Config{Log: lg, DataDir: t.TempDir(), NodeID: "solo", IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer start()
	passivatedSessionSavesAFoldSnapshot(t, n)
}

// passivatedSessionSavesAFoldSnapshot runs tasks of one session on n, letting it
// passivate every 20, until its log holds a fold snapshot of it, and then one
// more task, folded from it.
func passivatedSessionSavesAFoldSnapshot(t *testing.T, n *Node) {
	t.Helper()
	snaps := n.snapshots()
	if snaps == nil {
		t.Fatalf("the node's log (%T) keeps no snapshots", n.log)
	}
	waitPassivated := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := n.system.Root.RequestFuture(n.host, &actors.CountSessions{}, 5*time.Second).Result()
			if err != nil {
				t.Fatal(err)
			}
			if res.(int) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the session never passivated")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var seq uint64
	for i := 0; seq == 0; i++ {
		if i == 200 {
			t.Fatal("no snapshot after 200 tasks")
		}
		runTask(t, n, "long", fmt.Sprintf("echo %d", i))
		if i%20 == 19 {
			waitPassivated()
			snap, ok, err := snaps.LoadSnapshot(context.Background(), "long")
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				seq = snap.Seq
			}
		}
	}
	events, err := n.log.Read(context.Background(), "long", seq)
	if err != nil || len(events) == 0 || events[0].Seq != seq {
		t.Fatalf("the snapshot is at seq %d, the log's events from there: %d, %v", seq, len(events), err)
	}
	runTask(t, n, "long", "echo after")
	if events, err = n.log.Read(context.Background(), "long", seq+1); err != nil || len(events) == 0 || events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the task after the snapshot: %d events, %v", len(events), err)
	}
}

// savedSnapshots is an eventlog.Snapshots that counts its saves.
type savedSnapshots struct{ saves int }

func (s *savedSnapshots) SaveSnapshot(context.Context, eventlog.FoldSnapshot) error {
	s.saves++
	return nil
}

func (s *savedSnapshots) LoadSnapshot(context.Context, string) (eventlog.FoldSnapshot, bool, error) {
	return eventlog.FoldSnapshot{}, false, nil
}

// A node that owns its log (ownedLog) saves its sessions' fold snapshots while
// it holds the log, and refuses them, as its writes, once another node took it.
func TestOwnedLogRefusesSnapshotsOnceTaken(t *testing.T) {
	raw := &savedSnapshots{}
	o := &logOwner{owned: make(chan struct{}), taken: make(chan struct{})}
	s := ownedSnapshots{raw, o}
	snap := eventlog.FoldSnapshot{SessionID: "s", Seq: 1, EventID: "s/1"}
	close(o.owned)
	if err := s.SaveSnapshot(context.Background(), snap); err != nil || raw.saves != 1 {
		t.Fatalf("a save by the owner: %v, %d saves", err, raw.saves)
	}
	o.err = errLogTaken
	close(o.taken)
	if err := s.SaveSnapshot(context.Background(), snap); !errors.Is(err, errLogTaken) || raw.saves != 1 {
		t.Fatalf("a save once the log was taken: %v, %d saves; want errLogTaken and none", err, raw.saves)
	}
}
