package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

func TestSchemaVersionMatchesMigrations(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("SchemaVersion is %d but there are %d migrations", SchemaVersion, len(migrations))
	}
}

// heldWriter holds the writer at its next group until released, so that a test can
// queue appends behind it and know exactly which groups the writer will see.
type heldWriter struct {
	t       *testing.T
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *heldWriter) hook(group []*appendReq) {
	if !h.armed.CompareAndSwap(true, false) {
		return
	}
	h.held <- struct{}{}
	select {
	case <-h.release:
	case <-h.t.Context().Done():
	}
}

// hold makes the writer stop at its next group and returns the function that lets it go.
func (h *heldWriter) hold() (released func()) {
	h.held, h.release = make(chan struct{}, 1), make(chan struct{})
	h.armed.Store(true)
	return func() { close(h.release) }
}

func (h *heldWriter) waitHeld() {
	h.t.Helper()
	select {
	case <-h.held:
	case <-time.After(time.Minute):
		h.t.Fatal("the writer did not reach its next group within a minute")
	}
}

// waitQueued waits until n appends are queued for the writer.
func waitQueued(t *testing.T, l *Log, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(l.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued after a minute, want %d", len(l.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// openTemp opens a log in a directory of the test's, closed at the test's end.
func openTemp(ctx context.Context, t *testing.T) *Log {
	t.Helper()
	l, err := Open(ctx, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func testEvent(t *testing.T, session string, seq uint64, actor string) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(&messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "calculator", Result: "144"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d/%s", session, seq, actor), session, seq, int64(seq), actor
	return e
}

// TestGroupCommit queues appends behind a held writer and checks that they are
// written as one transaction, that a conflicting batch in the group fails alone
// (its savepoint is rolled back, the others commit), and that when the group's
// transaction fails as a whole, each batch is retried alone and gets its own outcome.
func TestGroupCommit(t *testing.T) {
	h := &heldWriter{t: t}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := open(ctx, Config{Dir: dir}, h.hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})

	type call struct {
		batch []messages.Envelope
		want  error // nil, or the sentinel the error must wrap
		msg   string
	}
	run := func(calls []call) {
		t.Helper()
		release := h.hold()
		first := make(chan error, 1)
		go func() { first <- l.Append(ctx, []messages.Envelope{testEvent(t, "first", 1, "session")}) }()
		h.waitHeld()
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { errs[i] = l.Append(ctx, c.batch) })
		}
		waitQueued(t, l, len(calls))
		release()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("appends did not finish within a minute")
		}
		if err := <-first; err != nil && !errors.Is(err, eventlog.ErrSeqConflict) {
			t.Fatalf("first append: %v", err)
		}
		for i, c := range calls {
			switch {
			case c.msg != "":
				if errs[i] == nil || !strings.Contains(errs[i].Error(), c.msg) {
					t.Errorf("append %d (%s) = %v, want it to say %q", i, c.batch[0].ID, errs[i], c.msg)
				}
			case c.want == nil && errs[i] != nil:
				t.Errorf("append %d (%s): %v", i, c.batch[0].ID, errs[i])
			case c.want != nil && !errors.Is(errs[i], c.want):
				t.Errorf("append %d (%s) = %v, want an error wrapping %q", i, c.batch[0].ID, errs[i], c.want)
			}
		}
	}

	// Phase 1: 16 good batches and 4 that conflict with the event the held group writes.
	var calls []call
	for i := range 16 {
		s := fmt.Sprintf("good-%02d", i)
		calls = append(calls, call{batch: []messages.Envelope{testEvent(t, s, 1, "session"), testEvent(t, s, 2, "session")}})
	}
	for i := range 4 {
		s := fmt.Sprintf("bad-%d", i)
		calls = append(calls, call{batch: []messages.Envelope{testEvent(t, s, 1, "session"), testEvent(t, "first", 1, s)}, want: eventlog.ErrSeqConflict})
	}
	before := l.Stats()
	run(calls)
	after := l.Stats()
	if txs := after.Transactions - before.Transactions; txs != 2 {
		t.Errorf("the held group and the 20 appends queued behind it took %d transactions, want 2", txs)
	}
	if n := after.Events - before.Events; n != 1+16*2 {
		t.Errorf("%d events written, want %d", n, 1+16*2)
	}
	for i := range 4 {
		if got, err := l.Read(ctx, fmt.Sprintf("bad-%d", i), 0); err != nil || len(got) != 0 {
			t.Errorf("a conflicting batch leaked: %d events, %v", len(got), err)
		}
	}

	// Phase 2: a trigger makes one batch fail with a database error, which aborts the
	// whole transaction; the others must still be written, each in its own.
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.actor = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poisoned event'); END`); err != nil {
		t.Fatal(err)
	}
	calls = calls[:0]
	for i := range 6 {
		s := fmt.Sprintf("after-%d", i)
		calls = append(calls, call{batch: []messages.Envelope{testEvent(t, s, 1, "session")}})
	}
	calls = append(calls,
		call{batch: []messages.Envelope{testEvent(t, "poisoned", 1, "session"), testEvent(t, "poisoned", 2, "poison")}, msg: "poisoned event"},
		call{batch: []messages.Envelope{testEvent(t, "good-00", 1, "other")}, want: eventlog.ErrSeqConflict})
	run(calls)
	for i := range 6 {
		if got, err := l.Read(ctx, fmt.Sprintf("after-%d", i), 0); err != nil || len(got) != 1 {
			t.Errorf("after-%d: %d events, %v", i, len(got), err)
		}
	}
	if got, err := l.Read(ctx, "poisoned", 0); err != nil || len(got) != 0 {
		t.Errorf("the poisoned batch was partly written: %d events, %v", len(got), err)
	}
}

// TestMigrateFromVersion1 opens a log written by a build of schema version 1: its
// events read back unchanged (under epoch 0, which fencing neither fences nor
// hides), and owners take partitions and append under their epochs.
func TestMigrateFromVersion1(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	old := testEvent(t, "s", 1, "v1")
	for _, stmt := range append(append([]string{}, migrations[0]...), "PRAGMA user_version = 1") {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, old.SessionID, 1, old.ID, string(old.Type), old.Version, old.CausationID, old.CorrelationID, old.TS, old.Actor, []byte(old.Payload)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	epoch, err := l.Own(ctx, "node-a", []int{0})
	if err != nil || epoch != 1 {
		t.Fatalf("Own on a migrated log = %d, %v; want epoch 1", epoch, err)
	}
	next := testEvent(t, "s", 2, "v2")
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 0, Epoch: epoch}, []messages.Envelope{next}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "s", 0)
	if err != nil || len(got) != 2 || got[0].ID != old.ID || got[1].ID != next.ID {
		t.Fatalf("Read after migrating = %v, %v; want %s then %s", got, err, old.ID, next.ID)
	}
}

// TestGroupCommitAcrossBatches queues groups behind a held writer whose batches'
// rows the writer inserts together, several batches to a statement, over more
// than one statement. In each, one batch conflicts with an earlier batch of the
// group only: it takes the position or the ID of an event not yet inserted, or
// claims a session an earlier batch appends to, or appends a single event of an
// earlier batch again. Each batch gets what it gets when the batches are written
// one after the other (refused alone, or a repeat that writes nothing), and every
// other batch is written, in one transaction.
func TestGroupCommitAcrossBatches(t *testing.T) {
	h := &heldWriter{t: t}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := open(ctx, Config{Dir: t.TempDir()}, h.hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	type call struct {
		batch []messages.Envelope
		claim bool
		want  error // nil, or the sentinel the error must wrap
	}
	pair := func(s string, seq uint64, actor string) []messages.Envelope {
		return []messages.Envelope{testEvent(t, s, seq, actor), testEvent(t, s, seq+1, actor)}
	}
	for _, tc := range []struct {
		name string
		odd  func(p string) call // the odd batch, of sessions prefixed p
		// at: the odd batch's place in the group of 12 good batches of 2 events
		// (sessions p+"00" to p+"11"), after at of them; events: what the group
		// writes.
		at, events int
	}{
		{"position taken", func(p string) call {
			return call{batch: append(pair(p+"x", 1, "session")[:1], testEvent(t, p+"01", 2, "other")), want: eventlog.ErrSeqConflict}
		}, 5, 24},
		{"position taken past a statement", func(p string) call {
			return call{batch: append(pair(p+"x", 1, "session")[:1], testEvent(t, p+"01", 1, "other")), want: eventlog.ErrSeqConflict}
		}, 10, 24},
		{"ID taken", func(p string) call {
			e := testEvent(t, p+"x", 2, "session")
			e.ID = p + "02/1/session"
			return call{batch: []messages.Envelope{testEvent(t, p+"x", 1, "session"), e}, want: eventlog.ErrSeqConflict}
		}, 5, 24},
		{"claim of a session appended to", func(p string) call {
			return call{batch: pair(p+"03", 3, "session"), claim: true, want: eventlog.ErrSeqConflict}
		}, 5, 24},
		{"claim of a new session", func(p string) call {
			return call{batch: pair(p+"x", 1, "session"), claim: true}
		}, 10, 26},
		{"event appended again", func(p string) call {
			return call{batch: []messages.Envelope{testEvent(t, p+"03", 2, "session")}}
		}, 5, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := strings.ReplaceAll(tc.name, " ", "-") + "-"
			var calls []call
			for i := range 12 {
				if i == tc.at {
					calls = append(calls, tc.odd(p))
				}
				calls = append(calls, call{batch: pair(fmt.Sprintf("%s%02d", p, i), 1, "session")})
			}
			release := h.hold()
			first := make(chan error, 1)
			go func() { first <- l.Append(ctx, []messages.Envelope{testEvent(t, p+"first", 1, "session")}) }()
			h.waitHeld()
			errs := make([]error, len(calls))
			var wg sync.WaitGroup
			for i, c := range calls {
				// One at a time, so that the group holds them in this order.
				wg.Go(func() {
					if c.claim {
						errs[i] = l.Claim(ctx, c.batch)
					} else {
						errs[i] = l.Append(ctx, c.batch)
					}
				})
				waitQueued(t, l, i+1)
			}
			before := l.Stats()
			release()
			if err := <-first; err != nil {
				t.Fatalf("first append: %v", err)
			}
			wg.Wait()
			after := l.Stats()
			for i, c := range calls {
				switch {
				case c.want == nil && errs[i] != nil:
					t.Errorf("append %d (%s): %v", i, c.batch[0].ID, errs[i])
				case c.want != nil && !errors.Is(errs[i], c.want):
					t.Errorf("append %d (%s) = %v, want an error wrapping %q", i, c.batch[0].ID, errs[i], c.want)
				}
			}
			if txs := after.Transactions - before.Transactions; txs != 2 {
				t.Errorf("the held group and the %d appends queued behind it took %d transactions, want 2", len(calls), txs)
			}
			if n, want := after.Events-before.Events, uint64(1+tc.events); n != want {
				t.Errorf("%d events written, want %d", n, want)
			}
			infos, err := l.Sessions(ctx, eventlog.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			sessions := 0
			for _, s := range infos {
				if !strings.HasPrefix(s.ID, p) {
					continue
				}
				sessions++
				got, err := l.Read(ctx, s.ID, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := 2
				if s.ID == p+"first" {
					want = 1
				}
				if len(got) != want || s.Events != want {
					t.Errorf("session %s has %d events, its summary %d, want %d", s.ID, len(got), s.Events, want)
				}
				for i, e := range got {
					if id := fmt.Sprintf("%s/%d/session", s.ID, i+1); e.ID != id {
						t.Errorf("session %s seq %d holds %s, want %s", s.ID, e.Seq, e.ID, id)
					}
				}
			}
			if want := 1 + tc.events/2; sessions != want {
				t.Errorf("%d sessions, want %d", sessions, want)
			}
		})
	}
}
