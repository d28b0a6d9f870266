package sqlite_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A stream without tasks has no agent: a memory namespace's writes and the calls
// of a session with no task.submitted are counted under the agent "", as the
// ClickHouse log counts them, and the stats of the agent "default" (that of the
// tasks that named none) leave them out.
func TestStatsOfDefaultLeaveOutStreamsWithoutTasks(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	var events []messages.Envelope
	seqs := map[string]uint64{}
	add := func(session string, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seqs[session]++
		e.SessionID, e.Seq, e.Actor, e.TS = session, seqs[session], "session", int64(1000+len(events))
		e.ID = fmt.Sprintf("%s/%d", session, e.Seq)
		events = append(events, e)
	}
	add("s1", &messages.TaskSubmitted{Input: "x"})
	add("s1", &messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "calc", LatencyUS: 5})
	add("s1", &messages.TaskCompleted{Output: "z"})
	add("s2", &messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "orphan", LatencyUS: 1})
	add("memory/ns", &messages.MemoryAdded{Reason: "r", Memory: messages.MemoryRecord{MemoryID: "m", Tier: "episodic", Content: "c"}})
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	all, err := lg.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Sessions) != 2 || all.Sessions[0].Agent != "" || all.Sessions[0].Sessions != 1 || all.Sessions[1].Agent != "default" || all.Sessions[1].Completed != 1 {
		t.Errorf("sessions = %+v; want s2 under \"\", s1 under default", all.Sessions)
	}
	def, err := lg.Report(ctx, eventlog.StatsFilter{Agent: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(def); len(def.Tools) != 1 || def.Tools[0].Tool != "calc" || len(def.Memory) != 0 || len(def.Sessions) != 1 || def.Sessions[0].Sessions != 1 {
		t.Errorf("stats of default = %s; want s1's calc call and session only", b)
	}
}
