package clickhouse_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// streamTables are the tables a prune deletes a stream's rows from (the
// package's pruneTables).
var streamTables = []string{"event_ids", "sessions", "session_tasks", "session_summaries", "open_tasks", "events"}

// PruneListed deletes a whole list of streams with one mutation of each table
// that holds their rows, not one per stream, and leaves the stream listed whose
// last event is not before its bound.
func TestPruneListedIsOneMutationPerTable(t *testing.T) {
	addr := serverAddr(t)
	l, db := openLog(t, clickhouse.Config{})
	conn := rawConn(t, addr)
	ctx := testCtx(t, 5*time.Minute)
	mutations := func() map[string]uint64 {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT table, count() FROM system.mutations WHERE database = ? GROUP BY table", db)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]uint64{}
		for rows.Next() {
			var (
				table string
				n     uint64
			)
			if err := rows.Scan(&table, &n); err != nil {
				t.Fatal(err)
			}
			got[table] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}

	const n = 40
	var (
		streams []eventlog.StreamBound
		events  []messages.Envelope
	)
	for i := range n {
		e := event(t, fmt.Sprintf("%s%d", eventlog.A2APushStreamPrefix, i), 1)
		e.ID = fmt.Sprintf("a2apush-%d", i) // an ID of its own, as the push configs' are (event_ids)
		events = append(events, e)
		streams = append(streams, eventlog.StreamBound{ID: e.SessionID, BeforeUS: e.TS + 1})
	}
	later := event(t, eventlog.A2APushStreamPrefix+"later", 1)
	later.ID = "a2apush-later"
	events = append(events, later)
	streams = append(streams, eventlog.StreamBound{ID: later.SessionID, BeforeUS: later.TS}) // set again since its caller looked
	if err := l.Append(ctx, events); err != nil {
		t.Fatal(err)
	}

	before := mutations()
	got, err := l.PruneListed(ctx, streams)
	if err != nil || got != n {
		t.Fatalf("PruneListed = %d, %v; want the %d due", got, err, n)
	}
	after := mutations()
	for _, table := range streamTables {
		if d := after[table] - before[table]; d != 1 {
			t.Errorf("PruneListed of %d streams made %d mutations of table %s, want 1", n+1, d, table)
		}
	}
	for table, k := range after {
		if !slices.Contains(streamTables, table) && k != before[table] {
			t.Errorf("PruneListed made %d mutations of table %s, which holds no stream's rows", k-before[table], table)
		}
	}
	for _, e := range events[:n] {
		for deadline := time.Now().Add(30 * time.Second); ; {
			got, err := l.Read(ctx, e.SessionID, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			if !time.Now().Before(deadline) {
				t.Fatalf("Read(%s) after PruneListed: %d events; want none", e.SessionID, len(got))
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if got, err := l.Read(ctx, later.SessionID, 1); err != nil || len(got) != 1 {
		t.Fatalf("Read(%s), stamped at its bound: %d events, %v; want it kept", later.SessionID, len(got), err)
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{Prefix: eventlog.A2APushStreamPrefix})
	if err != nil || len(infos) != 1 || infos[0].ID != later.SessionID {
		t.Errorf("Sessions(push prefix) after PruneListed: %+v, %v; want only %s", infos, err, later.SessionID)
	}

	// Nothing due: no mutation at all.
	before = mutations()
	if got, err := l.PruneListed(ctx, streams); err != nil || got != 0 {
		t.Fatalf("PruneListed again = %d, %v; want 0", got, err)
	}
	if after := mutations(); !maps.Equal(before, after) {
		t.Errorf("PruneListed with nothing due made mutations: %v, then %v", before, after)
	}
}
