package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// The worker handles the jobs in the order they were offered, refuses one past its
// bound without blocking, and close waits for those queued.
func TestQueueWorkerOrderBoundAndDrain(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	q := newQueueWorker(2, func(ctx context.Context, job int) {
		if job == 0 {
			<-release // hold the worker so that the queue fills
		}
		mu.Lock()
		got = append(got, job)
		mu.Unlock()
	})
	if r := q.offer(0); r != queued {
		t.Fatalf("offer 0: %v", r)
	}
	// Wait until the worker took job 0, so the queue is empty and holds 2 more.
	deadline := time.Now().Add(10 * time.Second)
	for len(q.jobs) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker never took the first job")
		}
		time.Sleep(time.Millisecond)
	}
	for _, j := range []int{1, 2} {
		if r := q.offer(j); r != queued {
			t.Fatalf("offer %d: %v", j, r)
		}
	}
	if r := q.offer(3); r != queueFull {
		t.Fatalf("offer past the bound: %v, want queueFull", r)
	}
	close(release)
	if finished, dropped := q.close(time.Minute, -1); !finished || dropped != 0 {
		t.Fatalf("close: finished %v, dropped %d", finished, dropped)
	}
	if want := []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if r := q.offer(4); r != queueClosed {
		t.Fatalf("offer after close: %v, want queueClosed", r)
	}
	if finished, _ := q.close(time.Minute, -1); !finished {
		t.Fatal("a second close did not return at once as finished")
	}
}

// Past its timeout, close cancels the job running and drops those queued,
// unhandled; with a bounded wait it returns even if the job ignores its context.
func TestQueueWorkerCloseGivesUp(t *testing.T) {
	for _, c := range []struct {
		name       string
		cancelWait time.Duration
		ignore     bool
	}{{"waits for the cancelled job", -1, false}, {"bounded wait for a job that ignores its context", 50 * time.Millisecond, true}} {
		t.Run(c.name, func(t *testing.T) {
			started := make(chan struct{})
			stuck := make(chan struct{})
			defer close(stuck)
			var mu sync.Mutex
			var handled []int
			q := newQueueWorker(4, func(ctx context.Context, job int) {
				mu.Lock()
				handled = append(handled, job)
				mu.Unlock()
				if job != 0 {
					return
				}
				close(started)
				if c.ignore {
					<-stuck
					return
				}
				<-ctx.Done()
			})
			q.offer(0)
			<-started
			q.offer(1)
			q.offer(2)
			finished, dropped := q.close(10*time.Millisecond, c.cancelWait)
			if finished || dropped != 2 {
				t.Fatalf("close: finished %v, dropped %d; want false, 2", finished, dropped)
			}
			if c.ignore {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(handled, []int{0}) {
				t.Fatalf("handled %v after close gave up; want only the job that ran", handled)
			}
		})
	}
}
