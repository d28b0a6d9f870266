package actors

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// openClickHouse opens a ClickHouse log on a database of the test's own, on the
// server TROUPE_TEST_CLICKHOUSE names, or skips the test.
func openClickHouse(t *testing.T) *clickhouse.Log {
	t.Helper()
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set (see deploy/clickhouse.sh)")
	}
	lg, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr),
		Database: chtest.Database(t, addr, "troupe_test_"), FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return lg
}

// chReadCounter counts the events its ClickHouse log's reads return.
type chReadCounter struct {
	*clickhouse.Log
	events atomic.Int64
}

func (r *chReadCounter) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	evs, err := r.Log.Read(ctx, sessionID, fromSeq)
	r.events.Add(int64(len(evs)))
	return evs, err
}

// reactivation runs one task of session on a new session host over store, as
// after a passivation, and stops the host (the session passivates). It returns
// the events the session read from the log.
func reactivation(t *testing.T, store *chReadCounter, ag Agent, session string, round int, from *uint64) int64 {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
	defer effects.Close()
	sys := quietSystem()
	defer sys.Shutdown()
	store.events.Store(0)
	host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: store, Effects: effects, Agent: ag}))
	id := fmt.Sprintf("again-%d", round)
	submitTask(t, sys, host, session, id)
	waitTaskEnd(t, store.Log, session, id, from)
	if err := sys.Root.PoisonFuture(host).Wait(); err != nil { // the sessions passivate
		t.Fatal(err)
	}
	return store.events.Load()
}

// appendAll appends events in batches, under lease when its epoch is set.
func appendAll(t *testing.T, lg *clickhouse.Log, lease eventlog.Lease, events []messages.Envelope) {
	t.Helper()
	for i := 0; i < len(events); i += 500 {
		batch := events[i:min(i+500, len(events))]
		var err error
		if lease.Epoch > 0 {
			err = lg.AppendLeased(context.Background(), lease, batch)
		} else {
			err = lg.Append(context.Background(), batch)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A session on the ClickHouse log (a cluster's) re-activated after a
// passivation folds the events after its fold snapshot only, as on SQLite
// (TestReactivationReadsOnlyTheTail): the log keeps snapshots
// (eventlog.Snapshots), and without them each activation read the whole history.
//
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9000 go test ./actors -run TestReactivationOverClickHouseReadsOnlyTheTail -count=1
func TestReactivationOverClickHouseReadsOnlyTheTail(t *testing.T) {
	lg := openClickHouse(t)
	ag := benchStepAgent()
	ag.Model = llm.OfflineName
	_, events := longSession(t, Agents{Default: ag}, "long", 1000, 256)
	appendAll(t, lg, eventlog.Lease{}, events)
	store := &chReadCounter{Log: lg}
	from := uint64(len(events)) + 1
	// The first activation reads the whole history and, passivated, saves a fold
	// snapshot; the next ones read the events after it.
	if n := reactivation(t, store, ag, "long", 0, &from); n < int64(len(events)) {
		t.Fatalf("the first activation read %d events, want the whole history (%d)", n, len(events))
	}
	snap, ok, err := lg.LoadSnapshot(context.Background(), "long")
	if err != nil || !ok || snap.Seq <= uint64(len(events)) {
		t.Fatalf("after the first passivation: a snapshot at seq %d, %v, %v; want one beyond seq %d", snap.Seq, ok, err, len(events))
	}
	for round := 1; round <= 2; round++ {
		if n := reactivation(t, store, ag, "long", round, &from); n > 256 {
			t.Fatalf("round %d: the next task of a passivated session of 1,000 tasks (%d events) read %d events from the log", round, len(events), n)
		}
	}
}

// A snapshot that a stale owner saved after its partition moved, of its own
// history (its events at the session's seqs were superseded by the next
// owner's, of the same IDs and other content), is the log's latest, and is not
// used: the session actor finds the log's event at its seq another, folds the
// whole history (the next owner's), and its own snapshot, saved as it
// passivates, replaces the stale one.
func TestStaleOwnersSnapshotIsNotUsed(t *testing.T) {
	lg := openClickHouse(t)
	ag := benchStepAgent()
	ag.Model = llm.OfflineName
	as := Agents{Default: ag}
	// The stale owner's history: its events of the same IDs at the same seqs,
	// stamped at other times, with other tool results.
	_, staleEvents := longSession(t, as, "s", 100, 300)
	stale := NewSessionState("s").WithAgents(as)
	for i := range staleEvents {
		staleEvents[i].TS += 1000
		if err := stale.Apply(staleEvents[i]); err != nil {
			t.Fatal(err)
		}
	}
	_, events := longSession(t, as, "s", 100, 256)
	if len(events) != len(staleEvents) || events[len(events)-1].ID != staleEvents[len(events)-1].ID || eventSum(events[len(events)-1]) == eventSum(staleEvents[len(events)-1]) {
		t.Fatal("the two histories are not of the same IDs and other content")
	}
	ctx := context.Background()
	old, err := lg.Own(ctx, "old", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, lg, eventlog.Lease{Partition: 0, Epoch: old}, staleEvents)
	next, err := lg.Own(ctx, "next", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, lg, eventlog.Lease{Partition: 0, Epoch: next}, events)
	if got, err := lg.Read(ctx, "s", uint64(len(events))); err != nil || len(got) != 1 || eventSum(got[0]) != eventSum(events[len(events)-1]) {
		t.Fatalf("the log's last event is not the next owner's: %v, %v", got, err)
	}
	// The stale owner saves the snapshot of its history, as its session actor
	// would (the same key: the same build and agents).
	b, err := encodeState(stale)
	if err != nil {
		t.Fatal(err)
	}
	digested := as.withDigests()
	key := snapshotKey(&digested)
	if key.Codec == "" {
		t.Skip("the build cannot be told: no snapshot is used")
	}
	last := staleEvents[len(staleEvents)-1]
	if err := lg.SaveSnapshot(ctx, eventlog.FoldSnapshot{SessionID: "s", Seq: stale.LastSeq, EventID: stale.lastID, EventSum: eventSum(last),
		Rules: key.Rules, Codec: key.Codec, Agents: key.Agents, State: b, Sum: stateSum(b)}); err != nil {
		t.Fatal(err)
	}
	store := &chReadCounter{Log: lg}
	from := uint64(len(events)) + 1
	if n := reactivation(t, store, ag, "s", 0, &from); n < int64(len(events)) {
		t.Fatalf("the session read %d events: it used the stale owner's snapshot instead of folding the whole history (%d)", n, len(events))
	}
	snap, ok, err := lg.LoadSnapshot(ctx, "s")
	if err != nil || !ok || snap.Seq <= uint64(len(events)) {
		t.Fatalf("after the passivation: a snapshot at seq %d, %v, %v; want the session's own, beyond seq %d", snap.Seq, ok, err, len(events))
	}
	if n := reactivation(t, store, ag, "s", 1, &from); n > 256 {
		t.Fatalf("the next activation read %d events, want those after the session's own snapshot", n)
	}
}
