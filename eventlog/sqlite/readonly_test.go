package sqlite_test

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// openReadOnly opens dir read-only and closes the log at the end of the test.
func openReadOnly(t testing.TB, dir string) *sqlite.Log {
	t.Helper()
	l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func appendSeqs(t testing.TB, l *sqlite.Log, session string, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if err := l.Append(testCtx(t), []messages.Envelope{event(t, session, seq)}); err != nil {
			t.Fatal(err)
		}
	}
}

func wantEvents(t testing.TB, l *sqlite.Log, session string, n int) {
	t.Helper()
	ctx := testCtx(t)
	got, err := l.Read(ctx, session, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(got) != n {
		t.Fatalf("Read = %d events, want %d", len(got), n)
	}
	for i, e := range got {
		want := event(t, session, uint64(i+1))
		if e.ID != want.ID || e.Seq != want.Seq || !bytes.Equal(e.Payload, want.Payload) {
			t.Fatalf("event %d = %+v, want %+v", i, e, want)
		}
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	if len(infos) != 1 || infos[0].ID != session || infos[0].Events != n || infos[0].LastSeq != uint64(n) {
		t.Fatalf("Sessions = %+v, want one session %s with %d events", infos, session, n)
	}
}

func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A read-only Log beside a writer in the same process (it takes no lock) sees what
// the writer committed, before and after the read-only open, and keeps reading
// once the writer is closed.
func TestReadOnlyBesideWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	appendSeqs(t, w, "s", 1, 5)

	r := openReadOnly(t, dir)
	wantEvents(t, r, "s", 5)
	appendSeqs(t, w, "s", 6, 9)
	wantEvents(t, r, "s", 9)

	err = r.Append(testCtx(t), []messages.Envelope{event(t, "s", 10)})
	if !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("Append on a read-only log = %v, want ErrReadOnly", err)
	}
	if err := r.Append(testCtx(t), nil); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("Append(nil) on a read-only log = %v, want ErrReadOnly", err)
	}
	if st := r.Stats(); st != (sqlite.Stats{}) {
		t.Fatalf("read-only Stats = %+v, want zero", st)
	}

	// The writer is still the only one holding the lock, and still writes.
	if _, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir}); !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("second writer beside writer and reader = %v, want ErrLocked", err)
	}
	appendSeqs(t, w, "s", 10, 10)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "s", 10)

	// A fresh read-only open after the writer is gone.
	r2 := openReadOnly(t, dir)
	wantEvents(t, r2, "s", 10)
}

// Close releases everything; it is idempotent, and the methods then fail with
// ErrClosed. A writer can take the directory afterwards.
func TestReadOnlyClose(t *testing.T) {
	dir := t.TempDir()
	w := open(t, sqlite.Config{Dir: dir})
	appendSeqs(t, w, "s", 1, 3)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "s", 3)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	ctx := testCtx(t)
	if _, err := r.Read(ctx, "s", 0); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Read after Close = %v, want ErrClosed", err)
	}
	if _, err := r.Sessions(ctx, eventlog.Filter{}); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Sessions after Close = %v, want ErrClosed", err)
	}
	if err := r.Append(ctx, []messages.Envelope{event(t, "s", 4)}); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	w2 := open(t, sqlite.Config{Dir: dir})
	appendSeqs(t, w2, "s", 4, 4)
}

// Reading never changes the database file, even after the writer is gone.
func TestReadOnlyDoesNotWriteDatabase(t *testing.T) {
	dir := t.TempDir()
	w := open(t, sqlite.Config{Dir: dir})
	appendSeqs(t, w, "s", 1, 20)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "events.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "s", 20)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only open changed events.db")
	}
}

func TestReadOnlyNoLog(t *testing.T) {
	ctx := testCtx(t)
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := sqlite.Open(ctx, sqlite.Config{Dir: missing, ReadOnly: true})
	if !errors.Is(err, sqlite.ErrNoLog) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("read-only Open of a missing directory = %v, want ErrNoLog naming it", err)
	}
	if _, serr := os.Stat(missing); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("read-only Open created the directory: %v", serr)
	}

	empty := t.TempDir()
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: empty, ReadOnly: true})
	if !errors.Is(err, sqlite.ErrNoLog) || !strings.Contains(err.Error(), empty) {
		t.Fatalf("read-only Open of an empty directory = %v, want ErrNoLog naming it", err)
	}
	if names := dirEntries(t, empty); len(names) != 0 {
		t.Fatalf("read-only Open created %v in an empty directory", names)
	}

	// An empty database file, as a writer leaves it for an instant before its
	// schema is created: no log yet, and the file stays as it was.
	if err := os.WriteFile(filepath.Join(empty, "events.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: empty, ReadOnly: true})
	if !errors.Is(err, sqlite.ErrNoLog) {
		t.Fatalf("read-only Open of an empty database = %v, want ErrNoLog", err)
	}
	if fi, err := os.Stat(filepath.Join(empty, "events.db")); err != nil || fi.Size() != 0 {
		t.Fatalf("read-only Open changed the empty database: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(empty, "LOCK")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open created LOCK: %v", err)
	}

	// A file where the directory should be.
	file := filepath.Join(empty, "events.db")
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: file, ReadOnly: true})
	if !errors.Is(err, sqlite.ErrNoLog) || !strings.Contains(err.Error(), "not a data directory") || strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("read-only Open of a file as directory = %v, want ErrNoLog saying it is not a directory", err)
	}
}

// A read-only Log cannot migrate: a schema newer than this build is refused with
// advice to upgrade, and the file is left alone.
func TestReadOnlySchemaVersion(t *testing.T) {
	dir := t.TempDir()
	w := open(t, sqlite.Config{Dir: dir})
	appendSeqs(t, w, "s", 1, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := db.ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "too old") || errors.Is(err, sqlite.ErrNoLog) {
		t.Fatalf("read-only Open of schema 99 = %v, want an error saying this build is too old", err)
	}
}

func TestReadOnlyConfig(t *testing.T) {
	if err := (sqlite.Config{ReadOnly: true}).Validate(); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Validate(ReadOnly without Dir) = %v, want an error naming Dir", err)
	}
	ro := sqlite.Config{Dir: "x", ReadOnly: true, SyncFull: true, MaxGroupEvents: -1, QueueSize: -1, CloseTimeout: -1}
	if err := ro.Validate(); err != nil {
		t.Fatalf("Validate(ReadOnly with write options) = %v, want them ignored", err)
	}
	if err := (sqlite.Config{Dir: "x", ReadOnly: true, ReadConns: -1}).Validate(); err == nil {
		t.Fatal("Validate(ReadOnly, ReadConns -1) succeeded")
	}
}
