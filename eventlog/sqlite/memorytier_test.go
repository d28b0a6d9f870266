package sqlite_test

import (
	"slices"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// The memory figures of the stats (replay stats, GET /v1/stats, the dashboard's
// charts page) count memory operations by tier. A memory write names its tier in
// the memory it records (memory.added's "memory": {"tier"}), a clear at the top
// (memory.cleared's "tier"): both are counted under that tier, as the ClickHouse
// log counts them, never under an empty one. A memory.remembered (a write after
// task that found nothing to keep) names no tier: it is counted as the operation
// "remembered" under none, as ClickHouse's memory_ops counts it.
func TestStatsCountMemoryOpsUnderTheirTier(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	payloads := []messages.Payload{
		&messages.MemoryAdded{Reason: "api", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "Alice likes tea."}},
		&messages.MemoryAdded{Reason: "api", Memory: messages.MemoryRecord{MemoryID: "m2", Tier: "semantic", Content: "Bob likes coffee."}},
		&messages.MemoryUpdated{Reason: "api", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "Alice likes green tea."}},
		&messages.MemoryPromoted{Reason: "consolidation", From: "episodic", Memory: messages.MemoryRecord{MemoryID: "m3", Tier: "semantic", Content: "c"}},
		&messages.MemoryCleared{Reason: "api", Tier: "episodic"},
		&messages.MemoryRemembered{Key: "s-1/2/t", Reason: "remembered: nothing to keep: no fact in the turn"},
	}
	for i, p := range payloads {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.Actor = "memory/user:alice", uint64(i+1), "memory"
		e.ID, e.TS = e.SessionID+"/"+string(rune('1'+i)), int64(1_000_000+i)
		if err := lg.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := lg.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []eventlog.MemoryOps{
		{Tier: "", Op: "remembered", Count: 1},
		{Tier: "episodic", Op: "cleared", Count: 1},
		{Tier: "semantic", Op: "added", Count: 2},
		{Tier: "semantic", Op: "promoted", Count: 1},
		{Tier: "semantic", Op: "updated", Count: 1},
	}
	if !slices.Equal(st.Memory, want) {
		t.Errorf("Report's memory = %+v\nwant %+v", st.Memory, want)
	}
}
