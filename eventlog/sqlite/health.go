package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

// probeInterval bounds how often Writable writes to learn whether a log whose
// writes failed can write again.
const probeInterval = time.Second

// writeFailure is why the writer's last transaction failed (Log.failing).
type writeFailure struct{ err error }

// wrote records how a transaction of the writer ended: err is nil when it
// committed (its requests refused on their own, such as a seq conflict, included),
// else why it failed as a whole. It runs in the writer goroutine.
func (l *Log) wrote(err error) {
	switch {
	case err != nil:
		l.failing.Store(&writeFailure{err: err})
	case l.failing.Load() != nil:
		l.failing.Store(nil)
	}
}

// Writable implements eventlog.Health. While the last transaction committed it
// reads an atomic pointer and nothing else. Once one failed, it learns whether
// writes go through again, at most once every probeInterval and one caller at a
// time (the others get the failure known): first from the filesystem, which a
// full disk fails without a write (Linux: statfs); then by a write of the writer.
//
// That write must need room on the disk for its outcome to say there is room. In
// WAL mode a transaction that changes nothing (BEGIN; COMMIT) writes nothing at
// all, so the probe changes a page, and commits: the writer appends the page to the
// WAL, and syncs it as any commit. It adds a row with an empty ID to table aliases
// (no event ID is empty, so no alias is) and deletes it again, in one transaction that
// leaves the tables as they were. A WAL that a checkpoint let start over is
// rewritten from its start, in place, so the probe may go through where a large
// batch would not: the next write that fails makes the log unwritable again.
func (l *Log) Writable(ctx context.Context) error {
	if l.failing.Load() == nil {
		return nil
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/sqlite: %w", eventlog.ErrClosed)
	}
	return l.probes.Try(ctx, l.lastFailure, func(ctx context.Context, known error) error {
		if dir := filepath.Dir(l.path); noSpace(dir) {
			if errors.Is(known, eventlog.ErrFull) {
				return known // which names the filesystem
			}
			return fmt.Errorf("%w: the filesystem of %s has no space left (the last write failed with: %w)", eventlog.ErrFull, dir, known)
		}
		if err := l.submit(ctx, &appendReq{ctx: ctx, probe: true, done: make(chan error, 1)}); err != nil {
			return fmt.Errorf("eventlog/sqlite: a probe write to learn whether writes go through again: %w", err)
		}
		return nil
	})
}

// lastFailure is why the writer's last transaction failed, nil when it committed.
func (l *Log) lastFailure() error {
	if f := l.failing.Load(); f != nil {
		return f.err
	}
	return nil
}

// probeWrite is the write of Writable's probe, inside the writer's transaction.
func (l *Log) probeWrite(ctx context.Context) error {
	if _, err := l.w.exec(ctx, l.w.addAlias, ""); err != nil {
		return fmt.Errorf("eventlog/sqlite: probe write: %w", err)
	}
	if _, err := l.w.exec(ctx, l.w.dropProbe); err != nil {
		return fmt.Errorf("eventlog/sqlite: probe write: %w", err)
	}
	return nil
}
