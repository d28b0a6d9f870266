package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// idEvent is an event at (session, seq) with the given ID.
func idEvent(t *testing.T, session string, seq uint64, id string) messages.Envelope {
	t.Helper()
	e := testEvent(t, session, seq, "session")
	e.ID = id
	return e
}

// wantAppend fails t unless appending events returns nil (want nil) or an error
// wrapping want.
func wantAppend(ctx context.Context, t *testing.T, l *Log, want error, events ...messages.Envelope) {
	t.Helper()
	err := l.Append(ctx, events)
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("append %s: %v, want %v", describeEvents(events), err, want)
	}
}

// describeEvents names the events' IDs and positions.
func describeEvents(events []messages.Envelope) string {
	var parts []string
	for _, e := range events {
		parts = append(parts, fmt.Sprintf("%s at %s/%d", e.ID, e.SessionID, e.Seq))
	}
	return strings.Join(parts, ", ")
}

// wantIDs fails t unless the events of session, read from the log, have the IDs want.
func wantIDs(ctx context.Context, t *testing.T, l *Log, session string, want ...string) {
	t.Helper()
	events, err := l.Read(ctx, session, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("session %s holds IDs %q, want %q", session, got, want)
	}
}

// TestDerivedIDsUniqueWithAliases: an event whose ID is the ID derived from
// another position (an alias: "b/1" stored at a/1) and the event at that position
// with its derived ID have the same ID, which only one of them may hold, whichever
// comes first: in two transactions, in two batches of one transaction, written by
// an insert of several rows, and after the log is opened again. No index holds
// derived IDs: the writer looks the alias up. Each case starts from a new log,
// whose table aliases is empty.
func TestDerivedIDsUniqueWithAliases(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Run("AcrossTransactions", func(t *testing.T) {
		dir := t.TempDir()
		l, err := Open(ctx, Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { l.Close() }()
		// The alias first, then the derived event of its position.
		wantAppend(ctx, t, l, nil, idEvent(t, "a", 1, "b/1"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "b", 1, "b/1"))
		wantAppend(ctx, t, l, nil, idEvent(t, "a", 1, "b/1")) // stored: a redelivery
		wantAppend(ctx, t, l, nil, idEvent(t, "b", 1, "b/1-other"))
		wantIDs(ctx, t, l, "a", "b/1")
		wantIDs(ctx, t, l, "b", "b/1-other")
		// The derived event first, then an alias of it.
		wantAppend(ctx, t, l, nil, idEvent(t, "c", 1, "c/1"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "d", 1, "c/1"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "c", 2, "c/1"))
		// An alias of a position that holds another ID is no conflict, but two of them are.
		wantAppend(ctx, t, l, nil, idEvent(t, "e", 1, "free-e-1"))
		wantAppend(ctx, t, l, nil, idEvent(t, "f", 1, "e/1"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "e", 2, "e/1"))
		wantIDs(ctx, t, l, "e", "free-e-1")
		wantIDs(ctx, t, l, "f", "e/1")
		// Opened again, the log still knows its aliases.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if l, err = Open(ctx, Config{Dir: dir}); err != nil {
			t.Fatal(err)
		}
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "b", 2, "b/1"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "b", 1, "b/1"))
	})
	t.Run("InsertOfSeveralRows", func(t *testing.T) {
		l := openTemp(ctx, t)
		wantAppend(ctx, t, l, nil, idEvent(t, "g", 1, "h/1"), idEvent(t, "g", 2, "g/2"))
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "h", 1, "h/1"))
		wantIDs(ctx, t, l, "g", "h/1", "g/2")
		wantIDs(ctx, t, l, "h")
	})
	t.Run("OneTransaction", func(t *testing.T) {
		h := &heldWriter{t: t}
		l, err := open(ctx, Config{Dir: t.TempDir()}, h.hook)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		release := h.hold()
		first := make(chan error, 1)
		go func() { first <- l.Append(ctx, []messages.Envelope{testEvent(t, "first", 1, "session")}) }()
		h.waitHeld()
		errs := make([]chan error, 2)
		for i, e := range []messages.Envelope{idEvent(t, "m", 1, "n/1"), idEvent(t, "n", 1, "n/1")} {
			errs[i] = make(chan error, 1)
			go func() { errs[i] <- l.Append(ctx, []messages.Envelope{e}) }()
			waitQueued(t, l, i+1) // queued in this order
		}
		before := l.Stats().Transactions
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-errs[0]; err != nil {
			t.Fatalf("the alias, first of its group: %v", err)
		}
		if err := <-errs[1]; !errors.Is(err, eventlog.ErrSeqConflict) {
			t.Fatalf("the derived event after its alias in one group: %v, want %v", err, eventlog.ErrSeqConflict)
		}
		if n := l.Stats().Transactions - before; n != 2 { // the held group's, and theirs
			t.Fatalf("the two groups took %d transactions, want 2", n)
		}
		wantIDs(ctx, t, l, "m", "n/1")
		wantIDs(ctx, t, l, "n")
	})
}

// TestIDIndexHoldsNonDerivedIDs checks the ID index of a new log: the table has
// no UNIQUE (id) constraint, whose index took an entry for every event; the index
// events_by_id is partial, and the writer's lookup of an ID searches it.
func TestIDIndexHoldsNonDerivedIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := openTemp(ctx, t)
	wantIDIndex(ctx, t, l.rdb)
}

// wantIDIndex fails t unless the events table of db has no unique constraint and
// its index events_by_id is partial and searched by ID.
func wantIDIndex(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	var unique int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_index_list('events') WHERE origin = 'u'`).Scan(&unique); err != nil {
		t.Fatal(err)
	}
	if unique != 0 {
		t.Errorf("table events has %d unique constraints: each costs every event an index entry", unique)
	}
	var partial, isUnique int
	if err := db.QueryRowContext(ctx, `SELECT partial, "unique" FROM pragma_index_list('events') WHERE name = 'events_by_id'`).Scan(&partial, &isUnique); err != nil {
		t.Fatalf("index events_by_id: %v", err)
	}
	if partial != 1 || isUnique != 1 {
		t.Errorf("index events_by_id: partial %d, unique %d; want both", partial, isUnique)
	}
	var plan string
	rows, err := db.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT session_id, seq, epoch FROM events WHERE id = ? AND NOT (`+derivedWhere+`)`, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "\n"
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "SEARCH events USING INDEX events_by_id (id=?)") {
		t.Errorf("the lookup of an ID does not search events_by_id; plan:\n%s", plan)
	}
}

// schema6Log writes a log of schema version 6 in dir, holding events at the given
// positions with the given IDs, and returns its database, open.
func schema6Log(ctx context.Context, t *testing.T, dir string, events []messages.Envelope) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for v := range 6 {
		for _, stmt := range migrations[v] {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, "PRAGMA user_version = 6"); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if _, err := db.ExecContext(ctx, schema6Insert, e.SessionID, e.Seq, e.ID, e.TS); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// schema6Insert inserts an event as a writer of schema 6 does: a row whose ID or
// position is taken is skipped.
const schema6Insert = `INSERT OR IGNORE INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
	VALUES (?, ?, ?, 'tool.completed', 1, '', '', ?, 'session', '{}', 0)`

// TestMigrateFromVersion6 opens a log written at schema 6, whose IDs were unique
// through a UNIQUE (id) constraint, with events of derived IDs, of free IDs and one
// alias (an ID derived from another position): after the migration the
// constraint is gone, and every stored ID still deduplicates and conflicts as
// before, the alias too.
func TestMigrateFromVersion6(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	stored := []messages.Envelope{
		idEvent(t, "s", 1, "0190b2a4-7c5c-7d13-8e31-55bc8ee60001"), // a task's ID
		idEvent(t, "s", 2, "s/2"),
		idEvent(t, "s", 3, "s/3"),
		idEvent(t, "s", 4, "t/1"),  // an alias of t/1, which holds nothing
		idEvent(t, "s", 5, "t/01"), // no alias: no position derives it
	}
	db := schema6Log(ctx, t, dir, stored)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wantIDIndex(ctx, t, l.rdb)
	wantIDs(ctx, t, l, "s", "0190b2a4-7c5c-7d13-8e31-55bc8ee60001", "s/2", "s/3", "t/1", "t/01")
	for _, e := range stored {
		wantAppend(ctx, t, l, nil, e) // redelivered
	}
	for _, e := range stored {
		wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "x", 1, e.ID)) // stored elsewhere
	}
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "s", 6, "s/2"))
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "t", 1, "t/1")) // the stored alias holds it
	wantAppend(ctx, t, l, nil, idEvent(t, "s", 6, "s/6"), idEvent(t, "t", 1, "t-task"))
	wantIDs(ctx, t, l, "s", "0190b2a4-7c5c-7d13-8e31-55bc8ee60001", "s/2", "s/3", "t/1", "t/01", "s/6")
	wantIDs(ctx, t, l, "t", "t-task")
	wantIDs(ctx, t, l, "x")
}

// TestAliasesOfAnotherWriter: with Config.Shared, an alias another process's
// writer stored is seen by this one's next transaction, though this writer found
// table aliases empty before.
func TestAliasesOfAnotherWriter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	a, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wantAppend(ctx, t, b, nil, idEvent(t, "b", 1, "b/1"))
	wantAppend(ctx, t, a, nil, idEvent(t, "a", 1, "c/1"))
	wantAppend(ctx, t, b, eventlog.ErrSeqConflict, idEvent(t, "c", 1, "c/1"))
	wantIDs(ctx, t, b, "c")
}
