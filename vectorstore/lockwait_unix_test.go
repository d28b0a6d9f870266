//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package vectorstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

// lockHelperEnv tells a re-executed test binary to act as TestLockHelperProcess.
const lockHelperEnv = "TROUPE_VECTORSTORE_LOCK_HELPER_PATH"

// TestLockHelperProcess is not a test: TestLockWaitForStoppingHolder runs the test
// binary again with lockHelperEnv set, and this function then plays a node that
// stops: it opens the store, says "ready", and closes it a second later.
func TestLockHelperProcess(t *testing.T) {
	path := os.Getenv(lockHelperEnv)
	if path == "" {
		t.Skip("helper process of TestLockWaitForStoppingHolder")
	}
	s, err := vectorstore.Open(vectorstore.Config{Path: path})
	if err != nil {
		fmt.Println("helper: open:", err)
		os.Exit(2)
	}
	fmt.Println("helper: ready")
	time.Sleep(time.Second)
	_ = s.Close()
	os.Exit(0)
}

// TestLockWaitForStoppingHolder opens a store whose log another process holds and
// lets go a second later (a node restarted while the one before is still
// stopping): with LockWait, Open waits for it and succeeds, logging once whom it
// waits for.
func TestLockWaitForStoppingHolder(t *testing.T) {
	if os.Getenv(lockHelperEnv) != "" {
		t.Skip("running as the helper process")
	}
	path := filepath.Join(t.TempDir(), "v.log")
	cmd := startLockHelper(t, path)
	var logged bytes.Buffer
	s, err := vectorstore.Open(vectorstore.Config{Path: path, LockWait: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open while the holder stops = %v, want it to wait and succeed", err)
	}
	defer s.Close()
	if want := fmt.Sprintf("held by pid %d", cmd.Process.Pid); strings.Count(logged.String(), want) != 1 {
		t.Errorf("log %q does not say once %q", logged.String(), want)
	}
	// In this process a held lock is refused at once, whatever LockWait says.
	start := time.Now()
	if _, err := vectorstore.Open(vectorstore.Config{Path: path, LockWait: time.Minute}); err == nil || time.Since(start) > 30*time.Second {
		t.Errorf("second Open in this process = %v after %s, want ErrLocked at once", err, time.Since(start))
	}
}

// TestLockWaitEndsWithItsContext cancels the context of an OpenContext waiting for
// a log another process holds (a node stopped while it waits to start): it returns
// the context's error at once, not ErrLocked, nor the store once the holder lets go.
func TestLockWaitEndsWithItsContext(t *testing.T) {
	if os.Getenv(lockHelperEnv) != "" {
		t.Skip("running as the helper process")
	}
	path := filepath.Join(t.TempDir(), "v.log")
	startLockHelper(t, path)
	ctx, stop := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, stop)
	s, err := vectorstore.OpenContext(ctx, vectorstore.Config{Path: path, LockWait: time.Minute})
	if err == nil {
		_ = s.Close()
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, vectorstore.ErrLocked) {
		t.Fatalf("OpenContext whose context ends while it waits for the lock = %v, want context.Canceled", err)
	}
}

// startLockHelper runs TestLockHelperProcess on the store at path and returns once
// it holds the store's lock.
func startLockHelper(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	return vectorstoretest.StartHelperProcess(t, "TestLockHelperProcess", lockHelperEnv, path)
}

// TestLockWaitForHolderInAnotherPIDNamespace opens a store whose lock a process in
// another pid namespace (another container sharing the volume) holds, with the same
// pid as this one, and lets go a second later: Open waits for it rather than take
// it for a lock of its own, and the log says the pid is another namespace's.
func TestLockWaitForHolderInAnotherPIDNamespace(t *testing.T) {
	if os.Getenv(lockHelperEnv) != "" {
		t.Skip("running as the helper process")
	}
	if _, err := os.Readlink("/proc/self/ns/pid"); err != nil {
		t.Skip("no pid namespaces here:", err)
	}
	path := filepath.Join(t.TempDir(), "v.log")
	startLockHelper(t, path)
	// What a holder that is pid 1 of its container would write if this were pid 1 too.
	stamp := fmt.Sprintf("%d pid:[1]\n", os.Getpid())
	if err := os.WriteFile(path+".lock", []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	s, err := vectorstore.Open(vectorstore.Config{Path: path, LockWait: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open while a holder in another pid namespace stops = %v, want it to wait and succeed", err)
	}
	defer s.Close()
	if want := fmt.Sprintf("held by pid %d in another pid namespace", os.Getpid()); strings.Count(logged.String(), want) != 1 {
		t.Errorf("log %q does not say once %q", logged.String(), want)
	}
}
