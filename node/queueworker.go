package node

import (
	"context"
	"sync"
	"time"
)

// queueWorker is a bounded queue of jobs and the one goroutine that handles them,
// in order. It carries the node's work that follows a session's batch and must
// never hold the batch up (parentEnds, afterTaskWriter): offer never blocks, and a
// job past the bound is refused, its caller saying what that costs.
//
// close stops taking jobs and waits for those queued to be handled, up to a
// timeout. Past it, the context handed to handle is cancelled, and the jobs still
// queued are dropped unhandled.
type queueWorker[T any] struct {
	jobs   chan T
	done   chan struct{}
	ctx    context.Context
	stop   context.CancelFunc
	handle func(ctx context.Context, job T)

	mu     sync.Mutex
	closed bool
}

// queueOffer is what offer did with a job.
type queueOffer int

const (
	// queued: the worker will handle the job.
	queued queueOffer = iota
	// queueFull: the queue was at its bound; the job is dropped.
	queueFull
	// queueClosed: the queue is closed; the job is dropped.
	queueClosed
)

// newQueueWorker starts a worker that handles up to bound queued jobs, one at a
// time, with handle. handle's context ends when close gives up waiting.
func newQueueWorker[T any](bound int, handle func(ctx context.Context, job T)) *queueWorker[T] {
	ctx, stop := context.WithCancel(context.Background())
	q := &queueWorker[T]{jobs: make(chan T, bound), done: make(chan struct{}), ctx: ctx, stop: stop, handle: handle}
	go q.run()
	return q
}

// offer queues job unless the queue is full or closed; it never blocks.
func (q *queueWorker[T]) offer(job T) queueOffer {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return queueClosed
	}
	select {
	case q.jobs <- job:
		return queued
	default:
		return queueFull
	}
}

func (q *queueWorker[T]) run() {
	defer close(q.done)
	for job := range q.jobs {
		if q.ctx.Err() != nil {
			continue // closed past its timeout: drain without handling
		}
		q.handle(q.ctx, job)
	}
}

// close stops taking jobs and waits up to timeout for the worker to handle those
// queued. Past it, it cancels handle's context and waits for the worker to notice
// (the job it runs ends, those still queued are dropped) for at most cancelWait,
// or without bound if cancelWait is negative. It returns how many jobs were still
// queued at the timeout (dropped), and whether the worker finished within timeout.
// A second close returns at once.
func (q *queueWorker[T]) close(timeout, cancelWait time.Duration) (finished bool, dropped int) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return true, 0
	}
	q.closed = true
	close(q.jobs)
	q.mu.Unlock()
	defer q.stop()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-q.done:
		return true, 0
	case <-t.C:
	}
	dropped = len(q.jobs)
	q.stop()
	if cancelWait < 0 {
		<-q.done
		return false, dropped
	}
	w := time.NewTimer(cancelWait)
	defer w.Stop()
	select {
	case <-q.done:
	case <-w.C:
	}
	return false, dropped
}
