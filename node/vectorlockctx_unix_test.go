//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

// vectorLockHelperEnv tells a re-executed test binary to act as
// TestVectorLockHelperProcess, holding the vector store at its value.
const vectorLockHelperEnv = "TROUPE_NODE_VECTOR_LOCK_HELPER_PATH"

// TestVectorLockHelperProcess is not a test: TestNewStoppedWhileItWaitsForAVectorLock
// runs the test binary again with vectorLockHelperEnv set, and this function then
// plays a node that stops: it opens the store, says "ready", and closes it 3 s later.
func TestVectorLockHelperProcess(t *testing.T) {
	path := os.Getenv(vectorLockHelperEnv)
	if path == "" {
		t.Skip("helper process of TestNewStoppedWhileItWaitsForAVectorLock")
	}
	s, err := vectorstore.Open(vectorstore.Config{Path: path})
	if err != nil {
		fmt.Println("helper: open:", err)
		os.Exit(2)
	}
	fmt.Println("helper: ready")
	time.Sleep(3 * time.Second)
	_ = s.Close()
	os.Exit(0)
}

// TestNewStoppedWhileItWaitsForAVectorLock starts a node (LockWait a minute) whose
// memory vector store another process holds, and ends New's context while it waits
// (a node sent SIGTERM while it starts): New returns the context's error then, not
// the node once the holder lets go, nor ErrLocked when LockWait runs out.
func TestNewStoppedWhileItWaitsForAVectorLock(t *testing.T) {
	if os.Getenv(vectorLockHelperEnv) != "" {
		t.Skip("running as the helper process")
	}
	data := t.TempDir()
	path := node.MemoryVectorsPath(data, false, "")
	startVectorLockHelper(t, path)
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	ctx, stop := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, stop)
	n, err := node.New(ctx, node.Config{Log: lg, DataDir: data, LockWait: time.Minute, Memory: &memory.Config{Embedder: &countingEmbedder{}}})
	if err == nil {
		_ = n.Close()
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, vectorstore.ErrLocked) {
		t.Fatalf("New whose context ends while it waits for the memory vectors' lock = %v, want context.Canceled", err)
	}
}

// startVectorLockHelper runs TestVectorLockHelperProcess on the store at path and
// returns once it holds the store's lock.
func startVectorLockHelper(t *testing.T, path string) {
	t.Helper()
	vectorstoretest.StartHelperProcess(t, "TestVectorLockHelperProcess", vectorLockHelperEnv, path)
}
