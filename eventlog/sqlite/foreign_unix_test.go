//go:build unix

package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/dirstate"
)

// A data directory whose events.db is no event log — a directory, a FIFO, a text
// file, another program's SQLite database (with or without a user_version of its
// own) — is refused by Open, read-only or not, with ErrNotLog, at once, and nothing
// in the directory changes. Before, a FIFO blocked the open until a writer came, a
// directory gave "disk I/O error", a writer made its lock file and put the other
// program's database in WAL mode or added the log's tables to it, and a read-only
// open (replay) of a database whose user_version is below the log's took it for an
// older log and migrated it.
func TestOpenRefusesWhatIsNoEventLog(t *testing.T) {
	other := func(version int) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, stmt := range []string{
				"CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
				"INSERT INTO notes (body) VALUES ('mine')",
				fmt.Sprintf("PRAGMA user_version = %d", version),
			} {
				if _, err := db.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cases := map[string]func(t *testing.T, path string){
		"directory": func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o750); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"text file": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not a database, but some notes of mine\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"another program's database":                  other(0),
		"another program's database, user_version 5":  other(5),
		"another program's database, user_version 12": other(sqlite.SchemaVersion),
	}
	for name, build := range cases {
		for _, readOnly := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/readonly=%v", name, readOnly), func(t *testing.T) {
				dir := t.TempDir()
				build(t, filepath.Join(dir, "events.db"))
				before := listing(t, dir)
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: readOnly})
					if err == nil {
						err = errors.Join(errors.New("opened"), l.Close())
					}
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, sqlite.ErrNotLog) || !strings.Contains(err.Error(), filepath.Join(dir, "events.db")) {
						t.Fatalf("Open = %v, want ErrNotLog naming the file", err)
					}
				case <-time.After(time.Minute):
					t.Fatal("Open was still waiting after a minute")
				}
				if after := listing(t, dir); after != before {
					t.Fatalf("Open refused the directory but changed it:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
}

// A log of a newer build is refused by a writer before it makes its lock file.
func TestOpenOfANewerLogMakesNoLockFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "LOCK")); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, sqlite.Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "run a newer build") {
		t.Fatalf("Open of a newer build's log = %v, want the refusal naming a newer build", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "LOCK")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open refused a newer build's log but made its lock file (%v)", err)
	}
}

// listing is dir's entries with their kinds, sizes and modification times.
func listing(t *testing.T, dir string) string {
	t.Helper()
	l, err := dirstate.Listing(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A log being created by a starting node was taken, by a reader that looked at it
// between the node's first migration and its version stamp, for another program's
// database: its version and its tables were read in two statements, each at its own
// moment of the file. A read-only Open polling beside a starting writer sees no
// log yet (ErrNoLog) or the log, never ErrNotLog.
func TestReaderBesideAStartingLogNeverSeesAForeignDatabase(t *testing.T) {
	for range 60 {
		dir := t.TempDir()
		started := make(chan *sqlite.Log, 1)
		go func() {
			w, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
			if err != nil {
				t.Error(err)
			}
			started <- w
		}()
		for polling := true; polling; {
			select {
			case w := <-started:
				if w != nil {
					_ = w.Close()
				}
				polling = false
			default:
				r, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, ReadOnly: true})
				if errors.Is(err, sqlite.ErrNotLog) {
					t.Fatalf("a reader beside a log being created: %v", err)
				}
				if err == nil {
					_ = r.Close()
				}
			}
		}
	}
}
