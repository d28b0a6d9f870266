//go:build unix

package sqlite_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// flock locks belong to the open file description, so a second Open in the same
// process conflicts just as one from another process does.
func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	first := open(t, sqlite.Config{Dir: dir})
	_, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
	if !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, "stop the other node", fmt.Sprintf("pid %d", os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The failed Open left the first Log working.
	ctx := testCtx(t)
	if err := first.Append(ctx, []messages.Envelope{event(t, "s-1", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := open(t, sqlite.Config{Dir: dir})
	if got, err := second.Read(ctx, "s-1", 0); err != nil || len(got) != 1 {
		t.Fatalf("Read after reopen = %d events, %v", len(got), err)
	}
}

// helperEnv tells a re-executed test binary to act as TestHelperProcess.
const helperEnv = "TROUPE_EVENTLOG_SQLITE_HELPER_DIR"

// TestHelperProcess is not a test: startHelper runs the test binary again with helperEnv set, and this function then plays the other node. It opens
// the log (with Config.Shared if helperEnv_SHARED is set), appends the events its
// parent asked for to session helperEnv_SESSION ("helper" if unset), says "ready",
// and waits for its stdin to close; the parent kills it with SIGKILL long before
// that. If Open fails it prints the error, saying "locked" if it wraps ErrLocked.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process of TestLockAcrossProcesses, TestReadOnlyAcrossProcesses and TestSharedLockAcrossProcesses")
	}
	n, _ := strconv.Atoi(os.Getenv(helperEnv + "_EVENTS"))
	session := cmp.Or(os.Getenv(helperEnv+"_SESSION"), "helper")
	ctx := testCtx(t)
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, Shared: os.Getenv(helperEnv+"_SHARED") != ""})
	if errors.Is(err, eventlog.ErrLocked) {
		fmt.Println("helper: locked:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Println("helper: open:", err)
		os.Exit(2)
	}
	// With sessions, it appends to each, all at once, and goes on appending
	// after it says ready, until it is killed.
	sessions, _ := strconv.Atoi(os.Getenv(helperEnv + "_SESSIONS"))
	var wg sync.WaitGroup
	for i := range max(sessions, 1) {
		id := session
		if sessions > 0 {
			id = fmt.Sprintf("%s-%d", session, i)
		}
		wg.Add(1)
		go func() {
			for seq := 1; seq <= n || sessions > 0; seq++ {
				if seq == n+1 {
					wg.Done()
				}
				if err := l.Append(ctx, []messages.Envelope{event(t, id, uint64(seq))}); err != nil {
					fmt.Println("helper: append:", err)
					os.Exit(2)
				}
			}
			if n == 0 || sessions == 0 {
				wg.Done()
			}
		}()
	}
	wg.Wait()
	fmt.Println("helper: ready")
	if hold, _ := time.ParseDuration(os.Getenv(helperEnv + "_HOLD")); hold > 0 {
		// A node stopping: it lets the directory go after hold.
		time.Sleep(hold)
		_ = l.Close()
		os.Exit(0)
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = l.Close()
}

// helper says how startHelper runs TestHelperProcess.
type helper struct {
	events   int           // appended before it says ready, to each session
	session  string        // "helper" if empty
	sessions int           // if > 0, appends to sessions <session>-0 to -<sessions-1> at once
	shared   bool          // Config.Shared
	hold     time.Duration // if > 0, closes the log and exits this long after it is ready
}

// startHelper runs the test binary again as TestHelperProcess on dir, and returns
// once the helper has appended events events and holds the directory. The helper is
// killed at the end of the test.
func startHelper(ctx context.Context, t *testing.T, dir string, events int) *exec.Cmd {
	t.Helper()
	cmd, err := spawnHelper(ctx, t, dir, helper{events: events})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// spawnHelper runs TestHelperProcess as h says, and returns once it is ready, or
// an error with its output if it exits before.
func spawnHelper(ctx context.Context, t *testing.T, dir string, h helper) (*exec.Cmd, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperEnv+"_EVENTS="+strconv.Itoa(h.events), helperEnv+"_SESSION="+h.session,
		helperEnv+"_SESSIONS="+strconv.Itoa(h.sessions))
	if h.shared {
		cmd.Env = append(cmd.Env, helperEnv+"_SHARED=1")
	}
	if h.hold > 0 {
		cmd.Env = append(cmd.Env, helperEnv+"_HOLD="+h.hold.String())
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close() })
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var out []string
		for sc.Scan() {
			if sc.Text() == "helper: ready" {
				ready <- nil
				return
			}
			out = append(out, sc.Text())
		}
		ready <- fmt.Errorf("helper exited before it was ready: %s", strings.Join(out, "\n"))
	}()
	select {
	case err := <-ready:
		return cmd, err
	case <-ctx.Done():
		t.Fatal("the helper process was not ready in time")
		return nil, nil
	}
}

// TestLockWaitForStoppingHolder opens a directory that a node in another process
// holds and lets go a second later (a restart while the node before is still
// stopping): with LockWait, Open waits for it and succeeds, logging once whom it
// waits for.
func TestLockWaitForStoppingHolder(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper process")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd, err := spawnHelper(ctx, t, dir, helper{events: 1, hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, LockWait: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open while the holder stops = %v, want it to wait and succeed", err)
	}
	defer l.Close()
	if want := fmt.Sprintf("held by pid %d", cmd.Process.Pid); strings.Count(logged.String(), want) != 1 {
		t.Errorf("log %q does not say once %q", logged.String(), want)
	}
	if got, err := l.Read(ctx, "helper", 0); err != nil || len(got) != 1 {
		t.Fatalf("Read = %d events, %v; want the holder's one", len(got), err)
	}
}

// TestLockWaitEndsWithItsContext cancels the context of an Open waiting for a
// directory another process holds (a node stopped while it waits to start): Open
// returns the context's error, not ErrLocked with its advice to stop the holder.
func TestLockWaitEndsWithItsContext(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper process")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	startHelper(ctx, t, dir, 1)
	openCtx, stop := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, stop)
	_, err := sqlite.Open(openCtx, sqlite.Config{Dir: dir, LockWait: time.Minute})
	if !errors.Is(err, context.Canceled) || errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("Open whose context ends while it waits for the lock = %v, want context.Canceled", err)
	}
}

// TestLockAcrossProcesses runs a second node as a child process on the same data
// directory: while it lives, Open fails with ErrLocked naming the directory and the
// child's pid. Then the child is killed with SIGKILL, mid-flight: the kernel releases
// its lock, and every append it saw succeed is in the log (synchronous=NORMAL in WAL
// mode is durable across a process crash).
func TestLockAcrossProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper process")
	}
	const events = 50
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := startHelper(ctx, t, dir, events)

	_, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("Open while another process holds the directory = %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, "stop the other node", fmt.Sprintf("pid %d", cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close, no deferred code
		t.Fatal(err)
	}
	_ = cmd.Wait()

	l := open(t, sqlite.Config{Dir: dir})
	got, err := l.Read(ctx, "helper", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != events {
		t.Fatalf("after kill -9 the log holds %d of the %d events the helper appended", len(got), events)
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 1 || infos[0].Events != events || infos[0].LastSeq != events {
		t.Fatalf("Sessions after kill -9 = %+v, %v", infos, err)
	}
}

// TestKilledUnderLoadListsEverySession runs a node as a child process that
// appends to 32 sessions at once (the writer groups their appends, and defers
// their summary rows), and kills it with SIGKILL while it appends: the summaries
// the next Open lists count every event each session holds.
func TestKilledUnderLoadListsEverySession(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper process")
	}
	const sessions, events = 32, 20
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd, err := spawnHelper(ctx, t, dir, helper{events: events, sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	l := open(t, sqlite.Config{Dir: dir})
	infos, err := l.Sessions(ctx, eventlog.Filter{Prefix: "helper-"})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != sessions {
		t.Fatalf("Sessions after kill -9 lists %d sessions, want %d", len(infos), sessions)
	}
	for _, i := range infos {
		got, err := l.Read(ctx, i.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < events || i.Events != len(got) || i.LastSeq != got[len(got)-1].Seq {
			t.Errorf("Sessions after kill -9: %s has %d events up to seq %d; it holds %d up to seq %d (at least %d)",
				i.ID, i.Events, i.LastSeq, len(got), got[len(got)-1].Seq, events)
		}
	}
}

// TestReadOnlyAcrossProcesses opens read-only a data directory that a node in
// another process holds: it reads the events the node committed, without the lock.
// Then the node is killed with SIGKILL, leaving its -wal and -shm files behind: a
// read-only Log still reads every event, from the WAL, without recovering into the
// database file.
func TestReadOnlyAcrossProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper process")
	}
	const events = 30
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := startHelper(ctx, t, dir, events)

	r, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open while another process holds the directory: %v", err)
	}
	got, err := r.Read(ctx, "helper", 0)
	if err != nil || len(got) != events {
		t.Fatalf("read-only Read = %d events, %v; want %d", len(got), err, events)
	}
	if _, err := sqlite.Open(ctx, sqlite.Config{Dir: dir}); !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("Open beside the helper = %v, want ErrLocked: the read-only open must not disturb its lock", err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "events.db-wal")); err != nil || fi.Size() == 0 {
		t.Fatalf("after kill -9 the -wal file should hold the events: %v, %v", fi, err)
	}

	db := filepath.Join(dir, "events.db")
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open after the writer died: %v", err)
	}
	got, err = r2.Read(ctx, "helper", 0)
	if err != nil || len(got) != events {
		t.Fatalf("read-only Read after kill -9 = %d events, %v; want %d", len(got), err, events)
	}
	infos, err := r2.Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 1 || infos[0].Events != events {
		t.Fatalf("read-only Sessions after kill -9 = %+v, %v", infos, err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(db); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("a read-only open after kill -9 changed events.db (%v)", err)
	}
	// The next writer recovers the WAL as usual.
	w := open(t, sqlite.Config{Dir: dir})
	if got, err := w.Read(ctx, "helper", 0); err != nil || len(got) != events {
		t.Fatalf("writer after the read-only opens reads %d events, %v; want %d", len(got), err, events)
	}
}

// A reader's probe of the lock (a read-only Log asking whether a node holds the
// directory) takes an exclusive flock for an instant; a node starting in that
// instant was refused as if another node held the directory (TestSharedOpenFresh
// failed so about once in 300 runs). The node takes the lock once the probe let
// go of it.
func TestOpenWaitsOutAProbeOfTheLock(t *testing.T) {
	for _, shared := range []bool{false, true} {
		dir := t.TempDir()
		l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, Shared: shared})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		probe, err := os.Open(filepath.Join(dir, "LOCK"))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(probe.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		opened := make(chan error, 1)
		go func() {
			l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, Shared: shared})
			if err == nil {
				err = l.Close()
			}
			opened <- err
		}()
		time.Sleep(20 * time.Millisecond) // the probe's instant, made long enough to be met
		probe.Close()
		if err := <-opened; err != nil {
			t.Fatalf("Shared %v: Open beside a probe of the lock: %v", shared, err)
		}
	}
}
