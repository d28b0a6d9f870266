package clickhouse

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestCutInsertIsCompleted: an attempt to write a batch is cut off after its
// INSERT wrote the events table and before it wrote the tables that the
// materialized views fill, and its caller has given up. The writer does not
// retry it for that caller; it completes the write of what landed, so that the
// listings (session summaries, open_tasks) and event_ids know the events that
// Read returns.
func TestCutInsertIsCompleted(t *testing.T) {
	addr, db := fencingDatabase(t, "cutinsert")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	rows, err := l.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'MaterializedView'")
	if err != nil {
		t.Fatal(err)
	}
	var views []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	if rows.Close(); len(views) < 5 {
		t.Fatalf("materialized views %q; want those of the schema", views)
	}

	callerCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	var (
		once    sync.Once
		hookErr error
	)
	l.cutInsert = func(rows []row) (err error) {
		once.Do(func() {
			// What a cut INSERT leaves: the events table written, the views' tables not.
			for _, v := range views {
				if hookErr = l.conn.Exec(ctx, "DETACH TABLE "+v); hookErr != nil {
					return
				}
			}
			hookErr = l.insert(ctx, rows)
			for _, v := range views {
				if err := l.conn.Exec(ctx, "ATTACH TABLE "+v); err != nil && hookErr == nil {
					hookErr = err
				}
			}
			giveUp() // the caller gives up while the attempt fails
			err = errors.New("connection reset by peer")
		})
		return err
	}
	requested := sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1})
	requested.ID = "request-2" // an ID event_ids lists
	batch := []messages.Envelope{sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x"}), requested}
	if err := l.Append(callerCtx, batch); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append whose caller gave up = %v, want context.Canceled", err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	// The writer takes the next batch once it dealt with the cut one.
	other := sessionEvent(t, 1, "u/1", &messages.TaskSubmitted{Input: "y"})
	other.ID, other.SessionID = "u/1", "u"
	if err := l.Append(ctx, []messages.Envelope{other}); err != nil {
		t.Fatal(err)
	}
	l.repairs.Wait()

	if events, err := l.Read(ctx, "s", 1); err != nil || len(events) != 2 {
		t.Fatalf("Read = %d events (%v); want the 2 the cut INSERT wrote", len(events), err)
	}
	for _, f := range []eventlog.Filter{{}, runningOnly} {
		infos, err := l.Sessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, i := range infos {
			if i.ID == "s" {
				found = true
				if i.Status != messages.StatusRunning || i.Events != 2 || i.Steps != 1 || i.LastSeq != 2 {
					t.Errorf("listing %+v: session %+v; want running, 2 events, 1 step, last seq 2", f, i)
				}
			}
		}
		if !found {
			t.Errorf("listing %+v misses the session whose events Read returns", f)
		}
	}
	var indexed uint64
	if err := l.conn.QueryRow(ctx, "SELECT count() FROM event_ids WHERE id = 'request-2'").Scan(&indexed); err != nil || indexed == 0 {
		t.Errorf("event_ids lists request-2 %d times (%v); want it listed", indexed, err)
	}
	// The session actor appends its batch again: found stored.
	if err := l.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
}
