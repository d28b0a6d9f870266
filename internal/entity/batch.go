package entity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// DefaultBatchMax bounds the writes a Batch decides and appends together.
const DefaultBatchMax = 64

// ResettableFold is a Fold that can forget what it folded: a Batch folds the
// changes it decides before they are stored (each is decided against the ones
// before it), and, when their Append fails, resets the fold, which the next
// CatchUp folds again from the stream's start.
type ResettableFold interface {
	Fold
	// Reset forgets every event folded: Seq returns 0 after it.
	Reset()
}

// Batch is a group commit on one stream: the writes that queue while an Append of
// the stream is in flight are decided one after another against the fold, at
// consecutive seqs, and appended together in one Append (at most Max writes), so
// that one stream's writes keep pace with its concurrent callers instead of taking
// one Append each. Every guarantee of Stream.Write holds for each write: a change
// is made at most once per idempotency key (a key folded already, by another
// writer or by an earlier write of the same batch, answers applied), one write's
// error (its change refused its input) fails only that write, and when another
// writer took the seqs the batch catches up and decides again every write of it
// (none of them is stored: an Append is atomic), up to MaxAttempts times.
//
// A change is decided with Lock held, and its events folded before they are
// appended: a failed Append resets the fold (ResettableFold.Reset), so readers
// that take Lock never see a change that is not stored once Lock is released. The
// zero Max is DefaultBatchMax. It is safe for concurrent use.
type Batch struct {
	Stream *Stream
	Fold   ResettableFold
	// Lock guards Fold: it is held while a batch is decided, appended and folded.
	Lock sync.Locker
	// Max bounds the writes of one Append (default DefaultBatchMax).
	Max int
	// Before, when set, is called with Lock held before each write's change is
	// decided (not for a write whose key was applied), and returns what the stream
	// writes ahead of it whatever the change decides: events without key, at the
	// seqs before the change's, folded at once, and appended with the batch even
	// when the change then fails (a memory namespace's expiry of its working
	// memories). Its error fails the write, except one wrapping
	// eventlog.ErrSeqConflict, which starts the batch's next attempt.
	Before func(ctx context.Context) ([]messages.Payload, error)

	mu      sync.Mutex
	queue   []*batchWrite
	running bool // a goroutine commits the queue
}

// batchWrite is one write queued in a Batch.
type batchWrite struct {
	ctx    context.Context
	key    string
	change func(context.Context) ([]messages.Payload, error)
	done   func(applied bool)
	end    chan struct{} // closed once err is set (and done called)
	err    error

	// The decision of the current attempt.
	events  []messages.Envelope
	applied bool
	failed  error
}

// Write makes one change as Stream.Write does, in the batch of the writes queued
// with it: it catches the fold up and, unless the key was applied already, appends
// the events change builds at the next seqs. change decides against the folded
// state, which holds the changes decided before it in the batch; its error is
// returned with nothing written for it (one wrapping eventlog.ErrSeqConflict starts
// the batch's next attempt); no payloads write nothing. done, when set, is called
// with Lock held once the change is stored (applied: the key was folded before),
// and reads what the caller needs of the fold. When ctx ends first Write returns
// its error: a change decided already may still be stored, once, under its key.
func (b *Batch) Write(ctx context.Context, key string, change func(context.Context) ([]messages.Payload, error), done func(applied bool)) error {
	w := &batchWrite{ctx: ctx, key: key, change: change, done: done, end: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, w)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-w.end:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run commits the queued writes, batch after batch, until none is left.
func (b *Batch) run() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), max(b.Max, 0))
		if n == 0 {
			n = min(len(b.queue), DefaultBatchMax)
		}
		ws := append([]*batchWrite(nil), b.queue[:n]...)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.commit(ws)
	}
}

// commit decides and appends one batch, and ends each of its writes.
func (b *Batch) commit(ws []*batchWrite) {
	// The batch's I/O ends when every one of its writers stopped waiting.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(ws)))
	for _, w := range ws {
		stop := context.AfterFunc(w.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}

	// The writers are told once Lock is released (deferred calls run last in,
	// first out): a writer that returns finds the stream's lock free, as after a
	// Stream.Write (a memory namespace released at once after a write, whose
	// release takes the lock only if it is free, stayed loaded).
	var ended []*batchWrite
	defer func() {
		for _, w := range ended {
			close(w.end)
		}
	}()
	b.Lock.Lock()
	defer b.Lock.Unlock()
	s, f := b.Stream, b.Fold
	finish := func(w *batchWrite, err error) {
		w.err = err
		ended = append(ended, w)
	}
	for attempt := range MaxAttempts {
		if err := s.CatchUp(ctx, f); err != nil {
			for _, w := range ws {
				finish(w, err)
			}
			return
		}
		var all []messages.Envelope
		conflict, decideErr := false, error(nil)
		for _, w := range ws {
			w.events, w.applied, w.failed = nil, false, nil
			if err := w.ctx.Err(); err != nil {
				w.failed = err
				continue
			}
			if w.key != "" && f.Applied(w.key) {
				w.applied = true
				continue
			}
			if b.Before != nil {
				ps, err := b.Before(w.ctx)
				if errors.Is(err, eventlog.ErrSeqConflict) {
					conflict = true
					break
				}
				if err != nil {
					w.failed = err
					continue
				}
				if len(ps) > 0 {
					events, err := b.fold(s.Events("", f.Seq(), ps))
					if err != nil {
						decideErr = err
						break
					}
					all = append(all, events...)
				}
			}
			ps, err := w.change(w.ctx)
			if errors.Is(err, eventlog.ErrSeqConflict) {
				conflict = true
				break
			}
			if err != nil || len(ps) == 0 {
				w.failed = err
				continue
			}
			events, err := b.fold(s.Events(w.key, f.Seq(), ps))
			if err != nil {
				decideErr = err
				break
			}
			w.events = events
			all = append(all, events...)
		}
		if decideErr != nil {
			b.refold(ctx)
			for _, w := range ws {
				finish(w, decideErr)
			}
			return
		}
		var err error
		if !conflict && len(all) > 0 {
			err = s.Log.Append(ctx, all)
			conflict = errors.Is(err, eventlog.ErrSeqConflict)
		}
		if conflict {
			if len(all) > 0 {
				f.Reset()
			}
			// Another writer took the seqs: catch up, then decide every write
			// again, after a random pause that grows with the attempts.
			if err := conflictPause(ctx, attempt); err != nil {
				for _, w := range ws {
					finish(w, err)
				}
				return
			}
			continue
		}
		if err != nil {
			if len(all) > 0 {
				b.refold(ctx)
			}
			err = fmt.Errorf("%s: appending to %s: %w", s.Kind, s.ID, err)
			for _, w := range ws {
				finish(w, err)
			}
			return
		}
		var syncErr error
		if len(all) > 0 {
			if err := f.Sync(ctx); err != nil {
				syncErr = fmt.Errorf("%s: the change is stored (seq %d) but the vector store lags; the next operation tries again: %w", s.Kind, all[len(all)-1].Seq, err)
			}
		}
		for _, w := range ws {
			switch {
			case w.failed != nil:
				finish(w, w.failed)
			case w.events != nil && syncErr != nil:
				finish(w, syncErr)
			default:
				if w.done != nil {
					w.done(w.applied)
				}
				finish(w, nil)
			}
		}
		return
	}
	err := fmt.Errorf("%w: %d appends in a row found their seq taken by another writer", s.Conflict, MaxAttempts)
	for _, w := range ws {
		finish(w, err)
	}
}

// refold resets the fold, which folded a batch that is not stored, and folds the
// stream again, so that readers that take Lock find what it holds (a failure
// leaves that to the next catch-up). The caller holds Lock.
func (b *Batch) refold(ctx context.Context) {
	b.Fold.Reset()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refoldTimeout)
	defer cancel()
	_ = b.Stream.CatchUp(ctx, b.Fold)
}

// refoldTimeout bounds the refold after a batch that is not stored.
const refoldTimeout = 10 * time.Second

// fold folds the events of one write, decided in a batch, and returns them.
func (b *Batch) fold(events []messages.Envelope, err error) ([]messages.Envelope, error) {
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		if err := b.Fold.Apply(e); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// Queued is the number of writes waiting for the next batch.
func (b *Batch) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
