//go:build unix

package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// readOnlyChildEnv names the directory the helper process TestReadOnlyChildProcess reads.
const readOnlyChildEnv = "TROUPE_SQLITE_READONLY_CHILD_DIR"

// readOnlyReport opens dir read-only and reports what it found: "events N" for the
// events of session s, or the error.
func readOnlyReport(dir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		return "error: " + err.Error()
	}
	defer l.Close()
	events, err := l.Read(ctx, "s", 0)
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("events %d", len(events))
}

// TestReadOnlyChildProcess is the helper process of unprivilegedReader: it does its
// work only when started by it.
func TestReadOnlyChildProcess(t *testing.T) {
	dir := os.Getenv(readOnlyChildEnv)
	if dir == "" {
		t.Skip("helper process of the read-only copy test")
	}
	fmt.Printf("REPORT %s\n", readOnlyReport(dir))
}

// unprivilegedReader returns a function that clears the write bits of a directory
// made by t.TempDir and reports (as readOnlyReport) what a user who may not write it
// reads there. Root may write anything, so as root the read runs in a copy of this
// test binary as the user nobody.
func unprivilegedReader(t *testing.T) func(dir string) string {
	t.Helper()
	// t.TempDir's parent is private to its owner: let nobody reach what is below it.
	bindir := t.TempDir()
	if err := os.Chmod(filepath.Dir(bindir), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(bindir, "sqlite.test")
	if os.Geteuid() == 0 {
		self, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, self, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return func(dir string) string {
		t.Helper()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		if os.Geteuid() != 0 {
			return readOnlyReport(dir)
		}
		cmd := exec.CommandContext(testCtx(t), bin, "-test.run=^TestReadOnlyChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), readOnlyChildEnv+"="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		_, report, ok := strings.Cut(string(out), "REPORT ")
		if !ok {
			if err != nil && strings.Contains(err.Error(), "operation not permitted") {
				t.Skipf("cannot start a process as the user nobody here: %v", err)
			}
			t.Fatalf("the unprivileged reader reported nothing: %v\n%s", err, out)
		}
		report, _, _ = strings.Cut(report, "\n")
		return report
	}
}

// copyFiles copies the named files of src, without write bits, into a new directory
// and returns it.
func copyFiles(t *testing.T, src string, names ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A copy of a log's database without its -shm file, in a directory the reader may
// not write (a read-only copy or mount), is read whole: SQLite cannot create the
// -shm file there, so the database is opened immutable, and nothing is created.
// Where that would lose commits (a -wal file beside it) or race a live node, Open
// says why instead.
func TestReadOnlyCopyInAReadOnlyDirectory(t *testing.T) {
	readUnprivileged := unprivilegedReader(t)
	src := t.TempDir()
	w := open(t, sqlite.Config{Dir: src})
	appendSeqs(t, w, "s", 1, 5)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirEntries(t, src); strings.Join(names, ",") != "LOCK,events.db" {
		t.Fatalf("a closed log left %v, want LOCK and events.db", names)
	}

	clean := copyFiles(t, src, "events.db")
	if got := readUnprivileged(clean); got != "events 5" {
		t.Fatalf("read-only copy without -shm: %s, want events 5", got)
	}
	if names := dirEntries(t, clean); strings.Join(names, ",") != "events.db" {
		t.Fatalf("reading the copy created files: %v", names)
	}

	// A writer that is still open holds commits in its -wal file.
	w2 := open(t, sqlite.Config{Dir: src})
	appendSeqs(t, w2, "s", 6, 8)
	got := readUnprivileged(copyFiles(t, src, "events.db", "events.db-wal"))
	if !strings.Contains(got, "events.db-wal holds commits") || !strings.Contains(got, "read-only directory") {
		t.Fatalf("read-only copy with a -wal and no -shm: %s, want an error saying why", got)
	}
	// The same copy where -shm can be created holds all eight events.
	if got := readOnlyReport(copyFiles(t, src, "events.db", "events.db-wal")); got != "events 8" {
		t.Fatalf("the copy with its -wal in a writable directory: %s", got)
	}

	// A node holds the directory (its LOCK), yet there is no -shm file.
	held := copyFiles(t, src, "events.db", "LOCK")
	lock, err := os.Open(filepath.Join(held, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if got := readUnprivileged(held); !strings.Contains(got, "a node holds") {
		t.Fatalf("read-only copy held by a node: %s, want an error saying so", got)
	}
}
