//go:build unix

package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/dirstate"
)

// Every command given a data directory that holds no event log of its own — no
// events.db, a FIFO as events.db, another program's SQLite database whose
// user_version is below the log's — fails at once with a message naming the file,
// exits 1, and changes nothing there. Before, a read-only command blocked on the
// FIFO, took the other program's database for an older log and tried to migrate it
// (making a LOCK file beside it), and fork made an empty log (events.db and LOCK) in
// a directory without one before it said that the session was not there.
func TestCommandsChangeNothingWhereThereIsNoLog(t *testing.T) {
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	export := filepath.Join(t.TempDir(), "s.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", export); code != 0 {
		t.Fatal(errs)
	}
	dirs := map[string]struct {
		build func(t *testing.T, dir string)
		says  string
	}{
		"no events.db": {func(t *testing.T, dir string) {}, "events.db does not exist"},
		"a FIFO": {func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "events.db"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is a FIFO"},
		"another program's database": {func(t *testing.T, dir string) {
			db, err := sql.Open("sqlite", filepath.Join(dir, "events.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, stmt := range []string{"CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')", "PRAGMA user_version = 5"} {
				if _, err := db.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
		}, "another program's database"},
	}
	commands := [][]string{
		{"list"}, {"show", id}, {"show", id, "--json"}, {"verify", id}, {"export", id},
		{"stats"}, {"fork", id, "--at", "2", "--input", "hi", "--model", "offline"},
	}
	for name, d := range dirs {
		for _, c := range commands {
			t.Run(name+"/"+c[0], func(t *testing.T) {
				dir := t.TempDir()
				d.build(t, dir)
				before := dirListing(t, dir)
				type result struct {
					code      int
					out, errs string
				}
				done := make(chan result, 1)
				go func() {
					code, out, errs := replay(t, append(c, "--data", dir)...)
					done <- result{code, out, errs}
				}()
				select {
				case r := <-done:
					if r.code != 1 || r.out != "" || !strings.Contains(r.errs, d.says) {
						t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and an error saying %q", r.code, r.out, r.errs, d.says)
					}
				case <-time.After(time.Minute):
					t.Fatal("still running after a minute")
				}
				if after := dirListing(t, dir); after != before {
					t.Fatalf("the data directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
	// import writes, and refuses the last two as well.
	for _, name := range []string{"a FIFO", "another program's database"} {
		dir := t.TempDir()
		dirs[name].build(t, dir)
		before := dirListing(t, dir)
		if code, _, errs := replay(t, "import", export, "--data", dir); code != 1 || !strings.Contains(errs, dirs[name].says) {
			t.Errorf("import into %s: exit %d, stderr %q", name, code, errs)
		}
		if after := dirListing(t, dir); after != before {
			t.Fatalf("import into %s changed the data directory:\nbefore:\n%s\nafter:\n%s", name, before, after)
		}
	}
}

// What a user typed is quoted in replay's messages, never written raw to the
// terminal: an ESC sequence in a session ID, a --data path, an --out or import
// path comes out as \x1b.
func TestMessagesEscapeWhatTheUserTyped(t *testing.T) {
	const esc = "\x1b]0;owned\a\x1b[2J"
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	for _, args := range [][]string{
		{"show", esc, "--data", src},
		{"show", "s", "--data", filepath.Join(t.TempDir(), esc)},
		{"export", id, "--data", src, "--out", filepath.Join(t.TempDir(), "missing", esc)},
		{"import", filepath.Join(t.TempDir(), esc), "--data", t.TempDir()},
		{"fork", esc, "--at", "1", "--data", src, "--model", "offline"},
		{"verify", id, "--data", src, "--config", filepath.Join(t.TempDir(), esc)},
	} {
		code, _, errs := replay(t, args...)
		if code == 0 || errs == "" {
			t.Errorf("%q: exit %d, stderr %q; want an error", args, code, errs)
		}
		if strings.ContainsAny(errs, "\x1b\a") {
			t.Errorf("%q: stderr holds the control characters raw: %q", args, errs)
		}
		if !strings.Contains(errs, `\x1b]0;owned\a\x1b[2J`) {
			t.Errorf("%q: stderr does not quote what was typed: %q", args, errs)
		}
	}
}

// dirListing is dir's entries with their kinds, sizes and modification times.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	l, err := dirstate.Listing(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
