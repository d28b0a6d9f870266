package sqlite_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// The stats of a range (replay stats --since, GET /v1/stats?since=, the
// dashboard's charts page) count the events at or after its start
// (eventlog.StatsFilter.SinceUS), also those of a session that started before it:
// a session started yesterday whose second task failed today is a failed session
// of today, with today's step and duration, as the ClickHouse log reports it. The
// embedded log counted only the sessions started in the range.
func TestStatsOfARangeCountTheSessionsActiveInIt(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	var events []messages.Envelope
	seqs := map[string]uint64{}
	add := func(session string, ts int64, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seqs[session]++
		e.SessionID, e.Seq, e.Actor, e.TS = session, seqs[session], "session", ts
		e.ID = fmt.Sprintf("%s/%d", session, e.Seq)
		events = append(events, e)
	}
	add("old", 1000, &messages.TaskSubmitted{Input: "x", Agent: "a"})
	add("old", 1100, &messages.ModelRequested{Key: "k1", Model: "m", Step: 1})
	add("old", 1200, &messages.TaskCompleted{Output: "z"})
	add("old", 5000, &messages.TaskSubmitted{Input: "y", Agent: "a"})
	add("old", 5100, &messages.ModelRequested{Key: "k2", Model: "m", Step: 1})
	add("old", 5200, &messages.TaskFailed{Error: "boom"})
	add("new", 6000, &messages.TaskSubmitted{Input: "x", Agent: "a"})
	add("new", 6100, &messages.TaskCompleted{Output: "z"})
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		since int64
		want  eventlog.SessionUsage
	}{
		{0, eventlog.SessionUsage{Agent: "a", Sessions: 2, Completed: 1, Failed: 1, AvgSteps: 1, P50DurationUS: 4200, P95DurationUS: 4200}},
		{4000, eventlog.SessionUsage{Agent: "a", Sessions: 2, Completed: 1, Failed: 1, AvgSteps: 0.5, P50DurationUS: 200, P95DurationUS: 200}},
		{6000, eventlog.SessionUsage{Agent: "a", Sessions: 1, Completed: 1, AvgSteps: 0, P50DurationUS: 100, P95DurationUS: 100}},
	} {
		st, err := lg.Report(ctx, eventlog.StatsFilter{SinceUS: c.since})
		if err != nil {
			t.Fatal(err)
		}
		if want := []eventlog.SessionUsage{c.want}; !slices.Equal(st.Sessions, want) {
			t.Errorf("since %d: sessions %+v\nwant %+v", c.since, st.Sessions, want)
		}
	}
}
