package sqlite_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A payload nested deeper than SQLite's JSON functions read (1000 levels), which
// Go's decoder reads (10000): a task whose payload carries such a member, as
// `replay import` stores an export's bytes, or a memory whose metadata nests so, as
// POST /v1/memories accepts it. The listing and the stats of the whole log must not
// fail for it: every other session is listed and counted.
func TestAPayloadTooDeepForSQLiteFailsNoListing(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	deep := strings.Repeat("[", 1001) + strings.Repeat("]", 1001)

	good := event(t, "good", 1)
	task := event(t, "imported", 1)
	task.Payload = json.RawMessage(`{"input":"hi","x":` + deep + `}`)
	if _, err := task.Decode(); err != nil {
		t.Fatalf("the payload does not decode: %v", err)
	}
	mem, err := messages.NewEnvelope(&messages.MemoryAdded{Reason: "api", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "c",
		Metadata: json.RawMessage(`{"x":` + deep + `}`)}})
	if err != nil {
		t.Fatal(err)
	}
	mem.ID, mem.SessionID, mem.Seq, mem.TS, mem.Actor = "memory/ns/1", "memory/ns", 1, good.TS, "memory"
	for _, e := range []messages.Envelope{good, task, mem} {
		if err := lg.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := lg.Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 3 {
		t.Errorf("Sessions: %d sessions, %v; want all 3", len(infos), err)
	}
	st, err := lg.Report(ctx, eventlog.StatsFilter{})
	if err != nil || len(st.Sessions) == 0 || len(st.Memory) != 1 {
		t.Errorf("Report: %+v, %v; want the sessions and the memory write counted", st, err)
	}
}
