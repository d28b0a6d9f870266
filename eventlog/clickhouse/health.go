package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/troupe-run/troupe/eventlog"
)

// probeInterval bounds how often Writable writes to learn whether a log whose
// writes failed can write again.
const probeInterval = time.Second

// writeFailure is an outage of the writer's writes (Log.failing): since when its
// writes fail, the failure that started it, and the latest.
type writeFailure struct {
	since      time.Time
	cause, err error
}

// writeFailed records that an attempt of the writer to write group failed with
// err: it starts an outage, logged once (a warning with its cause), unless one is
// under way. The writer's attempts are logged at debug level (writeGroup). Some
// failures say nothing of the server and start none: an error of the client's or
// this package's own making (a value it cannot convert, a schema it refuses), an
// attempt that Close stopped (ctx, the writer's, ended), and one that its callers
// stopped, every one of them canceled (a node stopping its sessions; attemptCtx).
// A caller whose deadline passed did not see its write go through in time: that
// is a failure, as its caller sees it.
func (l *Log) writeFailed(ctx context.Context, group []*appendReq, err error) {
	var conv *column.ColumnConverterError
	var perm *permanentError
	if ctx.Err() != nil || errors.As(err, &conv) || errors.As(err, &perm) {
		return
	}
	stopped := len(group) > 0
	for _, r := range group {
		stopped = stopped && errors.Is(r.ctx.Err(), context.Canceled)
	}
	if stopped {
		return
	}
	for {
		old := l.failing.Load()
		f := &writeFailure{since: time.Now(), cause: err, err: err}
		if old != nil {
			f.since, f.cause = old.since, old.cause
		}
		if !l.failing.CompareAndSwap(old, f) {
			continue
		}
		if old == nil {
			l.cfg.Logger.Warn("eventlog/clickhouse: writes fail; the writer retries them until one goes through (logged once per outage; each attempt at debug level)",
				"err", err, "buffered_events", l.Stats().Buffered)
		}
		return
	}
}

// wentThrough records that a write went through (an INSERT of the writer, or
// Writable's probe): it ends the outage under way, if any, logged once with how
// long it lasted and its cause.
func (l *Log) wentThrough(by string) {
	old := l.failing.Load()
	if old == nil || !l.failing.CompareAndSwap(old, nil) {
		return // none under way, or another write ended it, or a failure started anew
	}
	l.cfg.Logger.Info("eventlog/clickhouse: writes go through again", "by", by,
		"outage", time.Since(old.since).Round(time.Millisecond), "cause", old.cause, "buffered_events", l.Stats().Buffered)
}

// Writable implements eventlog.Health. While the writer's last attempt went
// through it reads an atomic pointer and nothing else. Once one failed (the
// server is down or unreachable, refuses writes, or did not answer in time), it
// learns whether writes go through again, at most once every probeInterval and one
// caller at a time (the others get the failure known), without waiting for the
// writer's next attempt, which may be seconds away (RetryMaxBackoff) or never
// come (no caller appends): it inserts a row into table write_probes
// (schema/0014_write_probes.sql), on a connection of its own pool, not through the
// writer's queue.
//
// A query proves only that the server answers; an INSERT also that the database
// takes writes: its user may write, its disk has room for a part. write_probes is
// a table of its own, which no reader reads, and a ReplacingMergeTree of one key,
// so it holds one row once its parts merge, however often it was probed. A probe
// may go through where an INSERT into events would not (that table's own limits:
// too many parts in a partition): the writer's next attempt that fails makes the
// log unwritable again.
func (l *Log) Writable(ctx context.Context) error {
	if l.failing.Load() == nil {
		return nil
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/clickhouse: %w", eventlog.ErrClosed)
	}
	return l.probes.Try(ctx, l.lastFailure, func(ctx context.Context, known error) error {
		if err := l.probe(ctx); err != nil {
			return fmt.Errorf("eventlog/clickhouse: a probe write to learn whether writes go through again: %w (the last write failed with: %w)", err, known)
		}
		l.wentThrough("probe")
		return nil
	})
}

// lastFailure is the latest failure of the outage under way, nil when none is.
func (l *Log) lastFailure() error {
	if f := l.failing.Load(); f != nil {
		return f.err
	}
	return nil
}

// probeQuery is Writable's INSERT, one row of key 1.
const probeQuery = "INSERT INTO write_probes (probe, probed_us)"

// probe inserts Writable's row, within the query timeout.
func (l *Log) probe(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	b, err := l.conn.PrepareBatch(ctx, probeQuery)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.Close(); cerr != nil && err == nil && !b.IsSent() {
			err = cerr
		}
	}()
	if err := b.Append(uint8(1), uint64(time.Now().UnixMicro())); err != nil {
		return err
	}
	return b.Send()
}
