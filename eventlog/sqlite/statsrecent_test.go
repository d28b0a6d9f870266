package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
)

// Report of a range reads the sessions with events in it only (recentReport,
// sessionsSince), by the primary key, where it scanned every event of the log;
// its answers are those of the queries that read every session (wholeReport),
// for ranges that cut sessions, tasks submitted before them, forks made after
// their parent and a fork's copied events, for every agent, with and without
// series, and with summary rows that lag their events (lag.go): a session whose
// row does not say it has events in the range yet is read all the same.
func TestReportOfARangeReadsItsSessionsOnly(t *testing.T) {
	ctx := context.Background()
	l := openTemp(ctx, t)
	const (
		sessions = 300
		start    = int64(1_700_000_000_000_000)
		step     = int64(60_000_000)
	)
	events, err := statsEvents(sessions, start, step)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendStats(ctx, l, events); err != nil {
		t.Fatal(err)
	}
	rows := func(query string, args ...any) []string {
		t.Helper()
		r, err := l.rdb.QueryContext(ctx, query, args...)
		if err != nil {
			t.Fatalf("%v: %s", err, query)
		}
		defer r.Close()
		cols, err := r.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for r.Next() {
			v := make([]any, len(cols))
			ptr := make([]any, len(cols))
			for i := range v {
				ptr[i] = &v[i]
			}
			if err := r.Scan(ptr...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(v...))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	end := start + 1100*step
	whole := []string{wholeReport.models, wholeReport.tools, wholeReport.sessions, wholeReport.memory}
	recent := []string{recentReport.models, recentReport.tools, recentReport.sessions, recentReport.memory}
	for i, q := range recent {
		for _, step := range rows("EXPLAIN QUERY PLAN "+q, 0, int64(math.MaxInt64), 0, "", "") {
			if strings.Contains(step, "SCAN events") {
				t.Errorf("query %d scans the events: %q", i, step)
			}
		}
	}
	compare := func(lagFrom int64) {
		t.Helper()
		var answered, sinces int
		// A range starts before a session, at its first event, during its
		// task (its events are a second apart) or between sessions.
		offsets := []int64{-1, 0, 3_500_000, 7_000_000, step / 2}
		for k := int64(-1); k <= 1100; k += 43 {
			since := start + k*step + offsets[sinces%len(offsets)]
			sinces++
			for _, agent := range []string{"", "b", "default", "nobody"} {
				for i := range whole {
					got := rows(recent[i], since, lagFrom, since, agent, agent)
					want := rows(whole[i], since, agent, agent)
					answered += len(want)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("query %d since %d agent %q lag from %d answers\n%s\nwant\n%s", i, since, agent, lagFrom,
							strings.Join(got, "\n"), strings.Join(want, "\n"))
					}
				}
				width := (end - since) / 24
				got := rows(reportSeries(since, end, width, true), since, lagFrom, since, agent, agent)
				want := rows(reportSeries(since, end, width, false), since, agent, agent)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("series since %d agent %q lag from %d answers\n%s\nwant\n%s", since, agent, lagFrom,
						strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		}
		if answered == 0 || sinces < 20 {
			t.Errorf("%d ranges answered %d rows", sinces, answered)
		}
	}
	compare(math.MaxInt64)

	// Report itself answers as the whole queries do.
	reports := func() {
		t.Helper()
		for _, f := range []eventlog.StatsFilter{
			{SinceUS: start + 250*step},
			{SinceUS: start + 250*step, Agent: "b"},
			{SinceUS: start + 280*step, UntilUS: end, Buckets: 24},
		} {
			got, err := l.Report(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := l.report(ctx, f, false)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
				t.Errorf("Report(%+v) = %+v\nwant %+v", f, got, want)
			}
			if len(got.Sessions) == 0 {
				t.Errorf("Report(%+v) counts no sessions", f)
			}
		}
	}
	reports()

	// Rows that lag: the last sessions' rows say nothing of their events past
	// the record of the summaries that lag, as a writer's say before it writes
	// them (lag.go).
	var from int64
	if err := l.rdb.QueryRowContext(ctx, `SELECT max(rowid) FROM events WHERE ts < ?`, start+200*step).Scan(&from); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", l.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{
		fmt.Sprintf(`UPDATE sessions SET updated_us = %d WHERE session_id IN (SELECT session_id FROM events WHERE rowid > %d)`, start-2*step, from),
		fmt.Sprintf(`INSERT INTO summary_lag (id, from_rowid) VALUES (1, %d)`, from),
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	compare(from)
	reports()
}
