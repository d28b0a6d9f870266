package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// reqState is where an Append call's batch is; guarded by Log.mu.
type reqState uint8

const (
	queued   reqState = iota // in the queue, not yet taken by the writer
	taken                    // in a group the writer is writing
	canceled                 // its caller gave up while it was queued: never written
)

// appendReq is one Append (or AppendLeased) call's batch.
type appendReq struct {
	ctx      context.Context
	lease    *eventlog.Lease     // AppendLeased's; nil for Append
	claim    bool                // Claim or ClaimLeased: only into a session with no events
	events   []messages.Envelope // checked by eventlog.CheckBatch
	payloads []string            // copies of the events' payloads, which callers own
	bytes    int                 // payload bytes
	enq      time.Time           // when it was queued
	state    reqState
	sent     bool       // the writer's: an INSERT of its group was started (insertRows)
	done     chan error // buffered: the writer never blocks on it
}

// epoch is the epoch r's events are written under: its lease's, 0 without one.
func (r *appendReq) epoch() uint64 {
	if r.lease == nil {
		return 0
	}
	return r.lease.Epoch
}

// partition is the partition of r's lease, -1 without one.
func (r *appendReq) partition() int64 {
	if r.lease == nil {
		return -1
	}
	return int64(r.lease.Partition)
}

// position is an event's place in the log.
type position struct {
	session string
	seq     uint64
}

// enqueue admits req into the buffer, waiting while the buffer is full.
func (l *Log) enqueue(ctx context.Context, req *appendReq) error {
	n, b := len(req.events), req.bytes
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return fmt.Errorf("eventlog/clickhouse: append: %w", eventlog.ErrClosed)
		}
		if l.bufEvents == 0 || (l.bufEvents+n <= l.cfg.MaxBuffered && l.bufBytes+b <= l.cfg.MaxBufferedBytes) {
			req.enq = time.Now()
			wasEmpty := l.qEvents == 0
			l.queue = append(l.queue, req)
			l.qEvents += n
			l.qBytes += b
			l.bufEvents += n
			l.bufBytes += b
			full := l.qEvents >= l.cfg.BatchSize || l.qBytes >= l.cfg.MaxBatchBytes
			l.mu.Unlock()
			if wasEmpty || full {
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
			return nil
		}
		if l.space == nil {
			l.space = make(chan struct{})
		}
		space := l.space
		l.mu.Unlock()
		l.stats.waits.Add(1)
		select {
		case <-space:
		case <-ctx.Done():
			return fmt.Errorf("eventlog/clickhouse: append: %w (waiting for buffer space; not written)", ctx.Err())
		case <-l.closing:
			return fmt.Errorf("eventlog/clickhouse: append: %w", eventlog.ErrClosed)
		}
	}
}

// cancel withdraws req if the writer has not taken it yet, and reports whether it did.
func (l *Log) cancel(req *appendReq) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.state != queued {
		return false
	}
	req.state = canceled
	l.qEvents -= len(req.events)
	l.qBytes -= req.bytes
	l.releaseLocked(len(req.events), req.bytes)
	return true
}

// answer gives req its outcome and frees its room in the buffer.
func (l *Log) answer(req *appendReq, err error) {
	req.done <- err
	l.mu.Lock()
	l.releaseLocked(len(req.events), req.bytes)
	l.mu.Unlock()
}

func (l *Log) releaseLocked(n, b int) {
	l.bufEvents -= n
	l.bufBytes -= b
	if l.space != nil {
		close(l.space)
		l.space = nil
	}
}

// runWriter is the writer goroutine: it gathers queued Append calls into groups
// (by size and by time) and writes each group with one INSERT, retrying while
// ClickHouse fails. After Close it writes what is queued without waiting for the
// flush interval; when ctx ends (Close gave up), it fails what is left.
//
// Groups go through a two-stage pipeline: while one group's INSERT runs, the
// writer takes the next group and looks up its stored events, so that the server
// works on both at once. The next group is decided only once the INSERT before it
// succeeded, with that group's rows added to its lookup (the lookup may have run
// before they landed): decisions are the same as if the groups ran one after the
// other. If the INSERT fails, the pipeline stops, the group is retried on its own,
// and the next group is looked up again.
func (l *Log) runWriter(ctx context.Context) {
	defer close(l.writerDone)
	var confirming sync.WaitGroup // groups whose leases are being confirmed
	defer confirming.Wait()
	defer func() {
		// The repairs are not waited out: one may hang on a connection the network
		// forgot (up to Config.QueryTimeout) while nothing is left to write.
		l.stopRepairs()
		l.repairs.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var (
		next       []*appendReq  // the group taken while the last INSERT ran
		nextStored *storedEvents // its lookup, if that succeeded
	)
	for {
		group, stored := next, nextStored
		next, nextStored = nil, nil
		if group == nil {
			if group, _, _ = l.nextGroup(ctx, timer, nil); group == nil {
				break
			}
		}
		if group = l.dropAbandoned(group, false); len(group) == 0 {
			continue
		}
		if stored == nil {
			var err error
			if stored, err = l.lookupGroup(ctx, group); err != nil {
				l.writeGroup(ctx, group, err)
				continue
			}
		}
		d := decide(group, stored, false)
		if len(d.rows) == 0 {
			l.finish(group, d)
			continue
		}
		done := make(chan error, 1)
		go func() { done <- l.insertRows(ctx, group, d.rows) }()
		var (
			insertErr error
			finished  bool
		)
		next, insertErr, finished = l.nextGroup(ctx, timer, done)
		if next != nil {
			if next = l.dropAbandoned(next, false); len(next) > 0 {
				nextStored, _ = l.lookupGroup(ctx, next) // on failure, looked up again later
			} else {
				next = nil
			}
		}
		if !finished {
			insertErr = <-done
		}
		if insertErr != nil {
			nextStored = nil // it may have been decided against rows that did not land
			l.writeGroup(ctx, group, insertErr)
			continue
		}
		// The next group is decided with this group's rows, fenced or not: they landed.
		l.confirmAndFinish(ctx, group, d, &confirming)
		if nextStored != nil {
			nextStored.add(d.claims) // its lookup may have run before these rows landed
		}
	}
	l.mu.Lock()
	left := l.queue
	l.queue = nil
	for _, r := range left {
		if r.state == queued {
			r.state = taken
		}
	}
	l.mu.Unlock()
	for _, r := range left {
		if r.state == taken {
			l.answer(r, fmt.Errorf("eventlog/clickhouse: append: %w before the batch was written (not written)", eventlog.ErrClosed))
		}
	}
}

// nextGroup waits until a group is due and takes it from the queue. It returns
// nil when the log is closing and the queue is empty, or when ctx ends. With a
// non-nil insert, it also returns (nil, its result, true) when the INSERT that
// insert reports on finishes before a group is due.
func (l *Log) nextGroup(ctx context.Context, timer *time.Timer, insert <-chan error) ([]*appendReq, error, bool) {
	for {
		l.mu.Lock()
		for len(l.queue) > 0 && l.queue[0].state == canceled {
			l.queue[0] = nil
			l.queue = l.queue[1:]
		}
		closing := l.closed
		if len(l.queue) == 0 {
			l.mu.Unlock()
			if (closing && insert == nil) || ctx.Err() != nil {
				return nil, nil, false
			}
			select {
			case <-l.wake:
			case <-l.closing:
				if insert != nil {
					err := <-insert
					return nil, err, true
				}
			case err := <-insert:
				return nil, err, true
			case <-ctx.Done():
			}
			continue
		}
		wait := l.cfg.FlushInterval - time.Since(l.queue[0].enq)
		if closing || wait <= 0 || l.qEvents >= l.cfg.BatchSize || l.qBytes >= l.cfg.MaxBatchBytes || ctx.Err() != nil {
			group := l.takeLocked()
			l.mu.Unlock()
			return group, nil, false
		}
		l.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-l.wake:
			timer.Stop()
		case <-l.closing:
			timer.Stop()
		case err := <-insert:
			timer.Stop()
			return nil, err, true
		case <-ctx.Done():
			timer.Stop()
		}
	}
}

// takeLocked takes the oldest queued requests, as many as one group holds (at
// least one).
func (l *Log) takeLocked() []*appendReq {
	var (
		group         []*appendReq
		events, bytes int
		i             int
	)
	for ; i < len(l.queue); i++ {
		r := l.queue[i]
		if r.state == canceled {
			continue
		}
		if len(group) > 0 && (events+len(r.events) > l.cfg.BatchSize || bytes+r.bytes > l.cfg.MaxBatchBytes) {
			break
		}
		r.state = taken
		group = append(group, r)
		events += len(r.events)
		bytes += r.bytes
	}
	clear(l.queue[:i])
	l.queue = l.queue[i:]
	l.qEvents -= events
	l.qBytes -= bytes
	return group
}

// finish answers the requests of a group that was written.
func (l *Log) finish(group []*appendReq, d decision) {
	l.stats.appends.Add(uint64(len(group)))
	l.stats.events.Add(uint64(len(d.rows)))
	if len(d.rows) > 0 {
		l.stats.inserts.Add(1)
	}
	for i, r := range group {
		l.answer(r, d.errs[i])
	}
}

// writeGroup writes a group on its own after an attempt failed with err, and
// answers each request. While ClickHouse fails with an error that may pass (it is
// down, restarting, overloaded), it retries with exponential backoff; requests
// whose callers gave up are dropped from the next attempt. A permanent error of a
// group of several requests is retried one request at a time, so that each
// caller gets its own batch's outcome.
func (l *Log) writeGroup(ctx context.Context, group []*appendReq, err error) {
	var (
		attempt   int
		firstFail = time.Now()
		live      = group
	)
	l.writeFailed(ctx, group, err)
	for {
		if live = l.dropCut(live); len(live) == 0 {
			return // every caller gave up: the attempt may have been cut short for that
		}
		if ctx.Err() != nil { // Close gave up waiting
			for _, r := range live {
				l.answer(r, fmt.Errorf("eventlog/clickhouse: append: %w while the batch was being written (it may or may not have been written): %v",
					eventlog.ErrClosed, err))
			}
			return
		}
		if !retryable(err) {
			if len(live) > 1 {
				for _, r := range live {
					l.writeAlone(ctx, r)
				}
				return
			}
			l.stats.failures.Add(1)
			l.answer(live[0], err)
			return
		}
		wait := backoff(l.cfg, attempt)
		attempt++
		l.stats.retries.Add(1)
		// The outage is logged once, as it starts and as it ends (writeFailed,
		// wentThrough): a line per attempt of every group made a line every few
		// seconds for as long as the server was down.
		l.cfg.Logger.Debug("eventlog/clickhouse: write failed, retrying",
			"err", err, "attempt", attempt, "retry_in", wait.Round(time.Millisecond),
			"failing_for", time.Since(firstFail).Round(time.Millisecond), "appends", len(live), "buffered_events", l.Stats().Buffered)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
		if live = l.dropCut(live); len(live) == 0 {
			return
		}
		var d decision
		if d, err = l.tryWrite(ctx, live, true); err == nil {
			l.cfg.Logger.Debug("eventlog/clickhouse: write succeeded after retries",
				"attempts", attempt+1, "outage", time.Since(firstFail).Round(time.Millisecond), "appends", len(live))
			l.finish(live, d)
			return
		}
		l.writeFailed(ctx, live, err)
	}
}

// writeAlone writes one request on its own, retrying like writeGroup.
func (l *Log) writeAlone(ctx context.Context, r *appendReq) {
	group := []*appendReq{r}
	d, err := l.tryWrite(ctx, group, true)
	if err != nil {
		l.writeGroup(ctx, group, err)
		return
	}
	l.finish(group, d)
}

// dropAbandoned answers and removes the requests whose callers gave up.
func (l *Log) dropAbandoned(reqs []*appendReq, tried bool) []*appendReq {
	live := reqs[:0:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			note := "not written"
			if tried && r.sent {
				note = "a failed attempt may have written it"
			}
			l.answer(r, fmt.Errorf("eventlog/clickhouse: append: %w (%s)", err, note))
			continue
		}
		live = append(live, r)
	}
	return live
}

// dropCut is dropAbandoned after a failed attempt to write reqs, and has the
// events of the requests it drops that landed completed (repairCut), for those
// an INSERT was started for (the others, whose attempts failed before, wrote
// nothing and need no repair, which would be one more query on a connection
// that may hang): the attempt
// may have been cut off after its INSERT wrote the events table and before it
// wrote the tables that the materialized views fill (the server writes an
// INSERT's views after its table: a server that stops or fails in between, an
// attempt stopped once every caller gave up). The requests that are retried are
// inserted again whole (see decide); the dropped ones are not, and a caller that
// appends its batch again finds its events stored and skips them, so without the
// repair those tables would never get their rows: the session summaries and
// open_tasks would miss them (a running session not listed, so never resumed),
// and event_ids an unconventional ID (a conflict not detected).
func (l *Log) dropCut(reqs []*appendReq) []*appendReq {
	live := l.dropAbandoned(reqs, true)
	if len(live) == len(reqs) {
		return live
	}
	var gone []*appendReq
	for _, r := range reqs {
		if r.sent && !slices.Contains(live, r) {
			gone = append(gone, r)
		}
	}
	if len(gone) > 0 {
		l.repairCut(gone)
	}
	return live
}

// repairCut looks up the events of requests whose callers gave up after an
// attempt to write them failed, and inserts again, in the background, those it
// finds stored: their copies collapse in the events table and the tables that
// count distinct seqs, and the tables the views fill get the rows a cut INSERT
// left out of them. It leaves alone the requests whose lease is no longer
// current: inserted again, their rows would be listed in fenced_events
// (schema/0010_stale_rows.sql), and hidden, though they may have landed while
// the lease was current. A repair that fails, or that still runs when the writer
// stops (Close wrote or failed the buffered appends), is logged; what it would
// have added stays missing (see the package doc).
func (l *Log) repairCut(reqs []*appendReq) {
	l.repairs.Go(func() {
		ctx, cancel := context.WithTimeout(l.repairCtx, l.cfg.QueryTimeout)
		defer cancel()
		stopped := func(err error) bool {
			if l.repairCtx.Err() == nil {
				return false
			}
			l.cfg.Logger.Warn("eventlog/clickhouse: Close stopped completing the write of an attempt cut off after its callers gave up; the listings may miss the events that landed",
				"appends", len(reqs), "err", err)
			return true
		}
		stored, err := l.lookup(ctx, reqs)
		if err != nil {
			if !stopped(err) {
				l.cfg.Logger.Warn("eventlog/clickhouse: could not look up the events of an attempt cut off after its callers gave up; the listings may miss those that landed",
					"appends", len(reqs), "err", err)
			}
			return
		}
		var rows []row
		for _, r := range reqs {
			epoch, leased := r.epoch(), r.lease != nil
			if leased && stored.current[r.lease.Partition] != epoch {
				continue
			}
			for j := range r.events {
				e := &r.events[j]
				if ids, _ := stored.holders(position{e.SessionID, e.Seq}, epoch, leased); slices.Contains(ids, e.ID) {
					rows = append(rows, row{e, r.payloads[j], epoch, r.partition()})
				}
			}
		}
		if len(rows) == 0 {
			return
		}
		if err := l.insert(ctx, rows); err != nil {
			if !stopped(err) {
				l.cfg.Logger.Warn("eventlog/clickhouse: could not complete the write of events an attempt cut off after its callers gave up; the listings may miss them",
					"events", len(rows), "err", err)
			}
			return
		}
		l.cfg.Logger.Info("eventlog/clickhouse: completed the write of events an attempt cut off after its callers gave up", "events", len(rows))
	})
}

// backoff returns the wait before retry attempt+1.
func backoff(cfg Config, attempt int) time.Duration {
	d := cfg.RetryInitialBackoff
	for range attempt {
		if d >= cfg.RetryMaxBackoff/2 {
			d = cfg.RetryMaxBackoff
			break
		}
		d *= 2
	}
	d = min(d, cfg.RetryMaxBackoff)
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * jitter)
}

// tryWrite makes one attempt to write reqs: it looks up their stored events,
// decides each request's outcome, and inserts the events of the requests that do
// not conflict.
func (l *Log) tryWrite(ctx context.Context, reqs []*appendReq, retry bool) (decision, error) {
	stored, err := l.lookupGroup(ctx, reqs)
	if err != nil {
		return decision{}, err
	}
	d := decide(reqs, stored, retry)
	if len(d.rows) > 0 {
		if err := l.insertRows(ctx, reqs, d.rows); err != nil {
			return decision{}, err
		}
		l.confirm(ctx, reqs, &d)
	}
	return d, nil
}

// decision is the outcome of a group: each request's error (nil, or one wrapping
// ErrSeqConflict or ErrFenced), the rows to insert, and the events of the
// requests that were accepted (inserted now or stored before).
type decision struct {
	errs   []error
	rows   []row
	claims []claim
}

// row is one event to insert, under epoch, with the partition of its lease (-1
// without one: schema/0010_stale_rows.sql).
type row struct {
	e         *messages.Envelope
	payload   string
	epoch     uint64
	partition int64
}

// claim is an event an accepted request holds: at its position, under its epoch.
type claim struct {
	p     position
	id    string
	epoch uint64
}

// decide decides each request of a group against the stored events and the
// requests before it in the group. An event found stored (its ID at its position,
// under the request's epoch) is not inserted again, unless retry says that an
// earlier attempt of these requests failed, possibly after its insert reached the
// server: the earlier insert may have written the events table but not the tables
// its materialized views fill, so everything is inserted again. Duplicates
// collapse (see the package doc).
func decide(reqs []*appendReq, stored *storedEvents, retry bool) decision {
	n := 0
	for _, r := range reqs {
		n += len(r.events)
	}
	d := decision{errs: make([]error, len(reqs)), rows: make([]row, 0, n), claims: make([]claim, 0, n)}
	inserted := make(map[claim]bool, n)
	for i, r := range reqs {
		if d.errs[i] = stored.check(r, retry); d.errs[i] != nil {
			continue
		}
		epoch, first := r.epoch(), len(d.claims)
		for j := range r.events {
			e := &r.events[j]
			c := claim{position{e.SessionID, e.Seq}, e.ID, epoch}
			if inserted[c] {
				continue // an earlier request of the group has the same event
			}
			if !stored.has(e, epoch, r.lease != nil) || retry {
				d.rows = append(d.rows, row{e, r.payloads[j], epoch, r.partition()})
				inserted[c] = true
			}
			d.claims = append(d.claims, c)
		}
		stored.add(d.claims[first:]) // later requests see them
	}
	return d
}

// lookupGroup looks up the stored events of a group, within the query timeout,
// and until every caller of the group gave up (attemptCtx).
func (l *Log) lookupGroup(ctx context.Context, reqs []*appendReq) (*storedEvents, error) {
	ctx, cancel := attemptCtx(ctx, l.cfg.QueryTimeout, reqs)
	defer cancel()
	return l.lookup(ctx, reqs)
}

// insertRows inserts rows, the events of the requests of group, within the query
// timeout, and until every caller of the group gave up (attemptCtx).
func (l *Log) insertRows(ctx context.Context, group []*appendReq, rows []row) error {
	for _, r := range group {
		r.sent = true // read by the writer once the INSERT returned
	}
	if l.beforeInsert != nil {
		l.beforeInsert()
	}
	ctx, cancel := attemptCtx(ctx, l.cfg.QueryTimeout, group)
	defer cancel()
	if l.cutInsert != nil {
		if err := l.cutInsert(rows); err != nil {
			return err
		}
	}
	if err := l.insert(ctx, rows); err != nil {
		return err
	}
	l.wentThrough("write")
	return nil
}

// attemptCtx returns the context of one attempt to write group: it ends with ctx,
// after timeout, or once the ctx of every request of the group ended. Those
// callers were told that their batches may or may not be written, and nobody
// waits for the outcome: the writer stops the attempt and goes on with the next
// group (writeGroup drops the abandoned requests), rather than holding their
// room in the buffer, and every caller behind them, until the attempt times out.
func attemptCtx(ctx context.Context, timeout time.Duration, group []*appendReq) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	var left atomic.Int64
	left.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, r := range group {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return actx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// confirmAndFinish answers the requests of a group whose INSERT succeeded, once
// their leases are confirmed. The confirmation runs beside the next group's
// INSERT, which does not depend on it.
func (l *Log) confirmAndFinish(ctx context.Context, group []*appendReq, d decision, confirming *sync.WaitGroup) {
	leased := false
	for i, r := range group {
		leased = leased || (r.lease != nil && d.errs[i] == nil)
	}
	if !leased {
		l.finish(group, d)
		return
	}
	errs := slices.Clone(d.errs) // confirm sets them; the writer goes on with d
	confirming.Go(func() {
		d.errs = errs
		l.confirm(ctx, group, &d)
		l.finish(group, d)
	})
}

// confirm checks, after a group's INSERT, that the leases of its accepted
// requests are still current, and fails those that are not with ErrFenced. The
// lookup checked them before the INSERT; a partition taken in between (the race
// window, see the package doc) may have a new owner that read the session before
// these rows landed: Read hides them then, and their writer must not go on as if
// they were part of the session. A lease still current after the INSERT was
// current when it landed, so the next owner, which takes the partition before it
// reads, folds these rows: AppendLeased returns nil only for such a batch.
//
// confirm lists nothing in fenced_events: the INSERT returned after the server
// wrote fenced_events_mv's rows, so the rows that landed after the takeover are
// listed already, and the others landed before it, and the new owner, which
// takes the partition before it reads, folds them (listed, they were left out
// of the analytics although that owner went on from them).
func (l *Log) confirm(ctx context.Context, reqs []*appendReq, d *decision) {
	if l.beforeConfirm != nil {
		l.beforeConfirm()
	}
	var partitions []string
	for i, r := range reqs {
		if r.lease != nil && d.errs[i] == nil {
			partitions = append(partitions, strconv.Itoa(r.lease.Partition))
		}
	}
	if len(partitions) == 0 {
		return
	}
	current, err := l.currentEpochs(ctx, partitions)
	for i, r := range reqs {
		if r.lease == nil || d.errs[i] != nil {
			continue
		}
		switch {
		case err != nil:
			// Appending again is safe: the rows are found stored, and the lease
			// checked again.
			d.errs[i] = fmt.Errorf("eventlog/clickhouse: append under %s: written, but the lease could not be confirmed (append again): %w", r.lease, err)
		case current[r.lease.Partition] != r.lease.Epoch:
			d.errs[i] = fmt.Errorf("%w: the partition was taken (epoch %d) while the batch under %s was being written: it is in the log, folded by the new owner if it landed before the takeover, and otherwise hidden from Read unless the new owner wrote after it",
				eventlog.ErrFenced, current[r.lease.Partition], r.lease)
		}
	}
}

// currentEpochs reads the current epoch of partitions (decimal numbers).
func (l *Log) currentEpochs(ctx context.Context, partitions []string) (map[int]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	rows, err := l.conn.Query(ctx, "SELECT partition, max(epoch) FROM ownership WHERE partition IN ("+strings.Join(partitions, ", ")+") GROUP BY partition")
	if err != nil {
		return nil, fmt.Errorf("read the current epochs: %w", err)
	}
	defer rows.Close()
	current := make(map[int]uint64, len(partitions))
	for rows.Next() {
		var (
			p     uint32
			epoch uint64
		)
		if err := rows.Scan(&p, &epoch); err != nil {
			return nil, fmt.Errorf("read the current epochs: %w", err)
		}
		current[int(p)] = epoch
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the current epochs: %w", err)
	}
	return current, nil
}

// storedEvents is what a lookup found about a group's events.
type storedEvents struct {
	// at holds the rows stored at each position looked up (events table), of
	// every epoch; a stale owner's rows sit beside the new owner's.
	at map[position][]storedRow
	// where holds the positions, with their epochs, where the events table holds
	// the group's IDs, and indexed the (ID, position) pairs event_ids lists.
	where   map[string][]storedRow
	indexed map[idAt]bool
	// current holds the current epoch of each partition the group's leases name.
	current map[int]uint64
	// sessions holds, for the sessions the group's claims name, the compactable
	// streams it appends to (eventlog.Compactable), and those of the events
	// accepted since the lookup (add), the highest seq and epoch stored.
	sessions map[string]sessionTop
}

// sessionTop is the highest seq and the highest epoch of a session's stored events.
type sessionTop struct {
	seq, epoch uint64
}

// idAt is an ID at a position.
type idAt struct {
	p  position
	id string
}

// storedRow is one stored event: its ID and position, and the epoch it was written under.
type storedRow struct {
	p     position
	id    string
	epoch uint64
}

// canonicalID is the ID session actors give the event at p: "<session_id>/<seq>".
func canonicalID(p position) string {
	return p.session + "/" + strconv.FormatUint(p.seq, 10)
}

// canonicalPosition returns the position whose canonical ID id is, if any.
func canonicalPosition(id string) (position, bool) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return position{}, false
	}
	seq, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil || seq == 0 {
		return position{}, false
	}
	p := position{id[:i], seq}
	return p, canonicalID(p) == id // rejects "+7", "07" and the like
}

// add records the events of an accepted request (or of the group written just
// before, whose rows the lookup may have missed: it may have run while they were
// being inserted) as stored.
func (s *storedEvents) add(claims []claim) {
	for _, c := range claims {
		r := storedRow{c.p, c.id, c.epoch}
		s.at[c.p] = append(s.at[c.p], r)
		s.where[c.id] = append(s.where[c.id], r)
		s.indexed[idAt{c.p, c.id}] = true // inserted with its event_ids row, or found stored
		top := s.sessions[c.p.session]
		s.sessions[c.p.session] = sessionTop{max(top.seq, c.p.seq), max(top.epoch, c.epoch)}
	}
}

// holders returns the IDs stored at p that count for a writer under epoch: the
// rows of that epoch for a leased writer (lower epochs are a stale owner's, and
// give way; higher ones fence it), the rows of the highest epoch at p for Append.
// top is the highest epoch at p.
func (s *storedEvents) holders(p position, epoch uint64, leased bool) (ids []string, top uint64) {
	rows := s.at[p]
	for _, r := range rows {
		top = max(top, r.epoch)
	}
	if !leased {
		epoch = top
	}
	for _, r := range rows {
		if r.epoch == epoch && !slices.Contains(ids, r.id) {
			ids = append(ids, r.id)
		}
	}
	return ids, top
}

// has reports whether e is stored for a writer under epoch: its ID, alone, at its
// position, and listed in event_ids if its ID is not canonical.
func (s *storedEvents) has(e *messages.Envelope, epoch uint64, leased bool) bool {
	p := position{e.SessionID, e.Seq}
	if ids, _ := s.holders(p, epoch, leased); len(ids) != 1 || ids[0] != e.ID {
		return false
	}
	return e.ID == canonicalID(p) || s.indexed[idAt{p, e.ID}]
}

// check returns an error wrapping ErrFenced if r's lease is not current, or if an
// event of a later epoch holds one of its positions; or an error wrapping
// ErrSeqConflict if an event of r conflicts with a stored event (or one claimed by
// an earlier request of the group), or if r is a claim and its session has events
// (see claimed).
func (s *storedEvents) check(r *appendReq, retry bool) error {
	epoch, leased := r.epoch(), r.lease != nil
	if leased {
		if current := s.current[r.lease.Partition]; current != epoch {
			return fmt.Errorf("%w: append under %s refused: the partition's current epoch is %d", eventlog.ErrFenced, r.lease, current)
		}
	}
	if r.claim {
		if err := s.claimed(r, retry); err != nil {
			return err
		}
	}
	for _, e := range r.events {
		p := position{e.SessionID, e.Seq}
		ids, top := s.holders(p, epoch, leased)
		switch {
		case leased && top > epoch:
			return fmt.Errorf("%w: session %s seq %d holds an event of epoch %d, appended under %s",
				eventlog.ErrFenced, e.SessionID, e.Seq, top, r.lease)
		case len(ids) > 1:
			return fmt.Errorf("%w: session %s seq %d holds events %s and %s (two writers raced), appended %s",
				eventlog.ErrSeqConflict, e.SessionID, e.Seq, ids[0], ids[1], e.ID)
		case len(ids) == 1 && ids[0] != e.ID:
			return fmt.Errorf("%w: session %s seq %d holds event %s, appended %s",
				eventlog.ErrSeqConflict, e.SessionID, e.Seq, ids[0], e.ID)
		case len(s.at[p]) == 0 && eventlog.Compactable(e.SessionID) && s.sessions[e.SessionID].seq > e.Seq:
			// A hole DeleteEvents left, which only a writer that folded the
			// stream before the deletion would try to fill (eventlog.Compacting).
			return fmt.Errorf("%w: session %s holds events after seq %d, appended %s (its events were compacted: fold the stream again)",
				eventlog.ErrSeqConflict, e.SessionID, e.Seq, e.ID)
		}
		for _, q := range s.where[e.ID] {
			if q.p == p || (leased && q.epoch < epoch) {
				continue // the stale owner's copy, elsewhere, gives way
			}
			return fmt.Errorf("%w: event %s is stored at session %s seq %d, appended at session %s seq %d",
				eventlog.ErrSeqConflict, e.ID, q.p.session, q.p.seq, e.SessionID, e.Seq)
		}
	}
	return nil
}

// claimed returns an error if the session of claim r has stored events: of a
// later epoch than r's lease, ErrFenced; otherwise ErrSeqConflict. On a retry
// (after an attempt that failed, possibly once its INSERT reached the server), the
// session may hold what that attempt wrote: r's events, each at its position under
// its epoch, and nothing past them. That is taken for r's own write, and r is
// written again, as every request of a retry is (see decide).
func (s *storedEvents) claimed(r *appendReq, retry bool) error {
	epoch, leased := r.epoch(), r.lease != nil
	id := r.events[0].SessionID
	top, ok := s.sessions[id]
	if !ok {
		return nil
	}
	if leased && top.epoch > epoch {
		return fmt.Errorf("%w: claim of session %s under %s refused: it holds events of epoch %d", eventlog.ErrFenced, id, r.lease, top.epoch)
	}
	if retry && top.epoch == epoch {
		last, own := uint64(0), true
		for i := range r.events {
			e := &r.events[i]
			last = max(last, e.Seq)
			own = own && s.has(e, epoch, leased)
		}
		if own && top.seq <= last {
			return nil
		}
	}
	return fmt.Errorf("%w: claim of session %s (event %s at seq %d) refused: the session has events", eventlog.ErrSeqConflict, id, r.events[0].ID, r.events[0].Seq)
}

// lookupQuery finds, in one round trip, what is stored at the appended positions
// (1), where the appended IDs are listed in event_ids (2) and stored in events (3),
// the current epoch of the leases' partitions (4), and the highest seq and epoch
// of the sessions that claims name and of the compactable streams appended to
// (5: lookupClaimsQuery, added for a group with either: the hole check of
// eventlog.Compacting). The appended keys travel
// as external tables (sent with the query, not parsed as SQL text), and every
// branch uses a primary key. Positions are matched by a hash, which ClickHouse
// 18.16 checks several times faster than a (session_id, seq) tuple; a collision
// only returns an extra row, which decide ignores since it compares positions.
//
// An ID is stored either canonically (it is "<session_id>/<seq>" of its own
// position: found in events at that position) or listed in event_ids. So for an
// appended event whose ID is the canonical ID of another position, that position
// is looked up too; for the others, branch 3 reads their rows, with their
// epochs, in the sessions event_ids names.
const lookupQuery = `SELECT 1 AS src, session_id, seq, id, epoch FROM events
WHERE session_id IN (SELECT session_id FROM appended)
  AND cityHash64(session_id, seq) IN (SELECT cityHash64(session_id, seq) FROM appended)
UNION ALL
SELECT 2 AS src, session_id, seq, id, toUInt64(0) AS epoch FROM event_ids
WHERE id IN (SELECT id FROM appended)
UNION ALL
SELECT 3 AS src, session_id, seq, id, epoch FROM events
WHERE session_id IN (SELECT session_id FROM event_ids WHERE id IN (SELECT id FROM appended))
  AND id IN (SELECT id FROM appended)
UNION ALL
SELECT 4 AS src, '' AS session_id, toUInt64(partition) AS seq, '' AS id, max(epoch) AS epoch FROM ownership
WHERE partition IN (SELECT partition FROM leases)
GROUP BY partition`

// lookupClaimsQuery is the last branch of lookupQuery for a group with claims or
// compactable streams (table claimed lists their sessions).
const lookupClaimsQuery = `
UNION ALL
SELECT 5 AS src, session_id, max(seq) AS seq, '' AS id, max(epoch) AS epoch FROM events
WHERE session_id IN (SELECT session_id FROM claimed)
GROUP BY session_id`

func (l *Log) lookup(ctx context.Context, reqs []*appendReq) (*storedEvents, error) {
	tbl, err := ext.NewTable("appended",
		ext.Column("session_id", column.Type("String")),
		ext.Column("seq", column.Type("UInt64")),
		ext.Column("id", column.Type("String")))
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
	}
	leases, err := ext.NewTable("leases", ext.Column("partition", column.Type("UInt32")))
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
	}
	claimed, err := ext.NewTable("claimed", ext.Column("session_id", column.Type("String")))
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
	}
	partitions, tops := map[int]bool{}, map[string]bool{}
	top := func(session string) error {
		if tops[session] {
			return nil
		}
		tops[session] = true
		if err := claimed.Append(session); err != nil {
			return fmt.Errorf("eventlog/clickhouse: append: %w", err)
		}
		return nil
	}
	for _, r := range reqs {
		if r.claim {
			if err := top(r.events[0].SessionID); err != nil {
				return nil, err
			}
		}
		if r.lease != nil && !partitions[r.lease.Partition] {
			partitions[r.lease.Partition] = true
			if err := leases.Append(uint32(r.lease.Partition)); err != nil {
				return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
			}
		}
		for _, e := range r.events {
			if err := tbl.Append(e.SessionID, e.Seq, e.ID); err != nil {
				return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
			}
			if eventlog.Compactable(e.SessionID) {
				if err := top(e.SessionID); err != nil {
					return nil, err
				}
			}
			if p, ok := canonicalPosition(e.ID); ok && p != (position{e.SessionID, e.Seq}) {
				if err := tbl.Append(p.session, p.seq, e.ID); err != nil {
					return nil, fmt.Errorf("eventlog/clickhouse: append: %w", err)
				}
			}
		}
	}
	query, tables := lookupQuery, []*ext.Table{tbl, leases}
	if len(tops) > 0 {
		query, tables = lookupQuery+lookupClaimsQuery, append(tables, claimed)
	}
	if l.externalTables != nil {
		l.externalTables(tables)
	}
	rows, err := l.conn.Query(ch.Context(ctx, ch.WithExternalTable(tables...)), query)
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: append: look up stored events: %w", err)
	}
	defer rows.Close()
	s := &storedEvents{at: map[position][]storedRow{}, where: map[string][]storedRow{}, indexed: map[idAt]bool{}, current: map[int]uint64{}, sessions: map[string]sessionTop{}}
	for rows.Next() {
		var (
			src     uint8
			session string
			seq     uint64
			id      string
			epoch   uint64
		)
		if err := rows.Scan(&src, &session, &seq, &id, &epoch); err != nil {
			return nil, fmt.Errorf("eventlog/clickhouse: append: look up stored events: %w", err)
		}
		r := storedRow{position{session, seq}, id, epoch}
		switch src {
		case 1:
			if !slices.Contains(s.at[r.p], r) { // rows written twice and not merged yet
				s.at[r.p] = append(s.at[r.p], r)
				s.where[id] = append(s.where[id], r)
			}
		case 2:
			s.indexed[idAt{r.p, id}] = true
		case 3:
			if !slices.Contains(s.where[id], r) {
				s.where[id] = append(s.where[id], r)
			}
		case 4:
			s.current[int(seq)] = epoch
		case 5:
			s.sessions[session] = sessionTop{seq, epoch}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: append: look up stored events: %w", err)
	}
	return s, nil
}

// insertQuery names its columns: ClickHouse 18.16 needs the list for batch inserts.
const insertQuery = "INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch, lease_partition)"

// insert writes rows with one INSERT, column by column.
func (l *Log) insert(ctx context.Context, rows []row) (err error) {
	n := len(rows)
	var (
		sessions, ids, types, causes, corrs, actors, payloads = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs     = make([]uint64, n)
		versions = make([]int64, n)
		tss      = make([]int64, n)
		epochs   = make([]uint64, n)
		parts    = make([]int64, n)
	)
	for i, r := range rows {
		e := r.e
		sessions[i], seqs[i], ids[i], types[i] = e.SessionID, e.Seq, e.ID, string(e.Type)
		versions[i], causes[i], corrs[i] = int64(e.Version), e.CausationID, e.CorrelationID
		tss[i], actors[i], payloads[i], epochs[i], parts[i] = e.TS, e.Actor, r.payload, r.epoch, r.partition
	}
	b, err := l.conn.PrepareBatch(ctx, insertQuery)
	if err != nil {
		return fmt.Errorf("eventlog/clickhouse: append: prepare insert: %w", err)
	}
	defer func() {
		if cerr := b.Close(); cerr != nil && err == nil && !b.IsSent() {
			err = fmt.Errorf("eventlog/clickhouse: append: %w", cerr)
		}
	}()
	for i, col := range []any{sessions, seqs, ids, types, versions, causes, corrs, tss, actors, payloads, epochs, parts} {
		if err := b.Column(i).Append(col); err != nil {
			return fmt.Errorf("eventlog/clickhouse: append: column %d: %w", i, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("eventlog/clickhouse: append: insert %d events: %w", n, err)
	}
	return nil
}

// retryable reports whether a failed operation may succeed later. ClickHouse
// exceptions are classified by code; errors of the client's own making (a value it
// cannot convert) and of this package's (a schema it refuses) are permanent;
// anything else, such as a refused or broken connection or an attempt that timed
// out, is taken for an outage and retried.
func retryable(err error) bool {
	var exc *ch.Exception
	if errors.As(err, &exc) {
		return eventlog.TransientClickHouseCode(exc.Code)
	}
	var conv *column.ColumnConverterError
	var perm *permanentError
	if errors.As(err, &conv) || errors.As(err, &perm) {
		return false
	}
	return true
}

// permanentError marks an error that retrying cannot cure.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }
