package actors

import (
	"sync"
	"testing"
	"time"
)

// A pool's worker is kept from one function to the next: functions run one at a
// time make one worker.
func TestWorkersReuseAWaitingWorker(t *testing.T) {
	w := newWorkers(8, time.Hour)
	t.Cleanup(func() { w.sweep.Stop() })
	for range 20 {
		done := make(chan struct{})
		w.Go(func() { close(done) })
		<-done
		waitFor(t, "the worker to wait again", func() bool { return w.waiting.Load() == 1 })
	}
	if n := w.live.Load(); n != 1 {
		t.Fatalf("%d workers for functions run one at a time, want 1", n)
	}
}

// A pool's workers end once they stayed idle for a sweep's whole period; none is
// left behind, the sweep stops, and the pool makes new workers after.
func TestWorkersRetireIdle(t *testing.T) {
	w := newWorkers(8, 20*time.Millisecond)
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(4)
	for range 4 {
		w.Go(func() { started.Done(); <-release })
	}
	started.Wait()
	if n := w.live.Load(); n != 4 {
		t.Fatalf("%d workers for 4 functions at once, want 4", n)
	}
	close(release)
	waitFor(t, "the idle workers to end", func() bool { return w.live.Load() == 0 })
	waitFor(t, "the sweep to stop", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.armed
	})
	done := make(chan struct{})
	w.Go(func() { close(done) })
	<-done
	if n := w.live.Load(); n != 1 {
		t.Fatalf("%d workers after the pool emptied and ran a function, want 1", n)
	}
	waitFor(t, "the new worker to end", func() bool { return w.live.Load() == 0 })
}

// waitFor waits until cond holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
