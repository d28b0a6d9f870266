package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/troupe-run/troupe/eventlog"
)

// A sharded node's process may stop running for a while without knowing it: a
// SIGSTOP, a frozen VM, a stall. Past the group's session timeout (10 s for a
// node's groups, kafka.DialNode) the group evicts it and gives its partitions to
// other nodes, and it learns so only at its next heartbeat, a second or so after
// it runs again. Meanwhile its sessions went on where they were: a call a session
// had asked for before the pause (its request appended, the call not started yet,
// or waiting in its performer's queue) started, although the partition's new
// owner had folded the request and performed the call under the same key. So a
// node whose process went longer than doubtAfter without running doubts its
// ownership of every partition, and starts no call of their sessions until the
// log confirmed that it still owns the call's partition (its lease is the
// partition's current epoch: ownsCall), or a new assignment gave it a new lease.
// A gap of evictedAfter or more is past what the log can confirm: the group has
// likely evicted the node, and the partition's new owner records its epoch only
// once its rebalance is done (the previous owners' drain, its rejoin,
// takeLeases), seconds after; a node woken in between would read its own epoch
// still. So after such a pause no call of any partition starts until either a new
// assignment gave the node a new lease (a revoke first fails the waiting calls:
// their sessions are handed over), or the group let keptAfter pass without a
// revoke (it kept the node), after which the log decides as after a shorter pause
// (awaitEviction).
//
// The gap is measured on the monotonic clock (time.Now's reading, which a stopped
// process does not stop), as the cluster code measures its waits: it is no
// session's time, and nothing of it is recorded or replayed.
const (
	// doubtAfter is the longest gap between two ticks of the watch that leaves the
	// node sure of its ownership: half the group's session timeout, since the
	// last heartbeat may have gone out up to a heartbeat interval before the pause
	// began, and a tick comes late when the process is busy.
	doubtAfter = 5 * time.Second
	// pauseTick is how often the watch ticks while the process runs.
	pauseTick = time.Second
	// evictedAfter is the shortest gap after which the node counts itself
	// evicted from its group: the group's session timeout less its heartbeat
	// interval, since the last heartbeat may have gone out that long before the
	// pause began.
	evictedAfter = groupSessionTimeout - groupHeartbeat
	// groupSessionTimeout and groupHeartbeat are those of a node's consumer
	// groups (kafka.NodeSessionTimeout, kafka.NodeHeartbeat; a test holds them
	// equal: the node package does not depend on the kafka package).
	groupSessionTimeout = 10 * time.Second
	// groupRebalanceTimeout is the RebalanceTimeout of a node's groups
	// (kafka.NodeRebalanceTimeout): the longest an evicted node's revoke may come
	// after its wake, since the bus hands it to the node only once its partition
	// windows settled the messages in flight (HandoffWait, half of it by default).
	groupHeartbeat        = time.Second
	groupRebalanceTimeout = 30 * time.Second
)

// pauseWatch tells the pauses of the process (gaps past doubtAfter between its
// ticks) and which partitions the node confirmed it owns since the latest.
type pauseWatch struct {
	// now reads the monotonic clock (time.Now; tests move it).
	now func() time.Time

	mu   sync.Mutex
	last time.Time // the latest tick, or the watch's start
	// pauses counts the pauses seen; confirmed[p] is the count at which the node
	// last confirmed it owns partition p. p is in doubt while confirmed[p] < pauses.
	pauses    uint64
	confirmed map[int]uint64
	// evictions counts the pauses of evictedAfter or more; renewed[p] is the
	// count at which the node last took a lease of p (takeLeases). p is lost
	// while renewed[p] < evictions, whatever the log says.
	evictions uint64
	renewed   map[int]uint64
	// woke is the clock reading at which the latest of those pauses ended; kept
	// is the count of them the group is known to have kept the node through (no
	// revoke came within keptAfter of the wake: awaitEviction). p is lost only
	// while kept < evictions too. keptAfter is groupRebalanceTimeout unless a
	// test sets it.
	// sets it.
	woke      time.Time
	kept      uint64
	keptAfter time.Duration

	// reads are the reads of a lease's epoch in the log under way, one per lease
	// (confirmLease).
	reads singleflight.Group
}

// pauseMark is the watch's counts at a time (mark), to confirm or renew
// partitions at.
type pauseMark struct {
	pauses, evictions uint64
}

// clock returns the watch's clock reading. The caller holds w.mu.
func (w *pauseWatch) clock() time.Time {
	if w.now == nil {
		w.now = time.Now
	}
	return w.now()
}

// tick records that the process runs now, and a pause if it did not for longer
// than doubtAfter since the latest tick. The caller holds w.mu.
func (w *pauseWatch) tick() {
	now := w.clock()
	if !w.last.IsZero() {
		gap := now.Sub(w.last)
		if gap > doubtAfter {
			w.pauses++
		}
		if gap >= evictedAfter {
			w.evictions++
			w.woke = now
		}
	}
	w.last = now
}

// doubts reports whether the node doubts its ownership of partition p (a pause
// since it last confirmed it), whether it lost it for sure (a pause of
// evictedAfter or more since it last took a lease of it), and the counts to
// confirm it at (confirm).
func (w *pauseWatch) doubts(p int) (mark pauseMark, doubt, lost bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tick() // a pause the watch's loop has not seen yet
	return pauseMark{w.pauses, w.evictions}, w.confirmed[p] < w.pauses, w.renewed[p] < w.evictions && w.kept < w.evictions
}

// sinceEviction returns the count of pauses of evictedAfter or more, and how long
// from now the group has to revoke the node's partitions after the latest of them
// before the node counts itself kept (keep).
func (w *pauseWatch) sinceEviction() (evictions uint64, left time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tick()
	after := w.keptAfter
	if after <= 0 {
		after = groupRebalanceTimeout
	}
	return w.evictions, w.woke.Add(after).Sub(w.clock())
}

// keep records that the group kept the node through the pauses of evictedAfter
// or more counted up to evictions: its partitions are in doubt only.
func (w *pauseWatch) keep(evictions uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kept = max(w.kept, evictions)
}

// mark returns the counts now, to confirm or renew partitions at once the node
// learned it owns them (confirm, renew).
func (w *pauseWatch) mark() pauseMark {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tick()
	return pauseMark{w.pauses, w.evictions}
}

// confirm records that the log said the node owns partitions as of mark: read
// before it asked, so that a pause while it asked leaves them in doubt. It ends
// no eviction (renew).
func (w *pauseWatch) confirm(mark pauseMark, partitions ...int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.confirmed == nil {
		w.confirmed = map[int]uint64{}
	}
	for _, p := range partitions {
		w.confirmed[p] = max(w.confirmed[p], mark.pauses)
	}
}

// renew records that the node took a new lease of partitions (takeLeases) as of
// mark: it owns them, whatever pause came before.
func (w *pauseWatch) renew(mark pauseMark, partitions ...int) {
	w.confirm(mark, partitions...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.renewed == nil {
		w.renewed = map[int]uint64{}
	}
	for _, p := range partitions {
		w.renewed[p] = max(w.renewed[p], mark.evictions)
	}
}

// watchPauses ticks the node's pause watch every pauseTick until ctx is done or
// the node closes.
func (n *Node) watchPauses(ctx context.Context) {
	n.every(ctx, pauseTick, func(time.Time) {
		n.pauses.mu.Lock()
		n.pauses.tick()
		n.pauses.mu.Unlock()
	})
}

// claimCall is the claim of the calls of a sharded node's own sessions
// (actors.LocalEffects.Owned), made as each is requested: it notes the node's
// lease of the session's partition then, and returns the check the call makes as
// it is about to start (ownsCall). A node whose log fences nothing checks nothing.
func (n *Node) claimCall(sessionID string) func(context.Context) error {
	if n.leased == nil {
		return nil
	}
	lease, ok := n.ownedLease(sessionID)
	return func(ctx context.Context) error {
		if !ok {
			n.metrics.fenced.Inc()
			return fmt.Errorf("%w: session %s: node %s held no lease of its partition as the call was requested", eventlog.ErrFenced, sessionID, n.cfg.NodeID)
		}
		return n.ownsCall(ctx, sessionID, lease)
	}
}

// ownsCall is the check of a call of a sharded node's own session, requested
// under lease (claimCall), made as it is about to start: it fails with ErrFenced
// when the node no longer holds that very lease of the session's partition (it
// gave the partition up, was fenced on it, or took it again under a new lease:
// the session that asked for the call stopped meanwhile), or handed the lease's
// sessions over already (ownedLease). After a pause of the process
// (pauseWatch), it first has the partition's current epoch read in the log, as a
// session starting does (stillOwned): the call waits for that read, retried while
// the log does not answer (until the call's context ends), and starts only if no
// other node took the partition meanwhile. The calls of one lease wait for one
// read at a time (confirmLease): before, each read the log on its own, as many
// at once as the calls that waited through the pause. After a pause of
// evictedAfter or more the call first waits to learn whether the group evicted
// the node (awaitEviction): a revoke fails it, and the node's next lease of the
// partition is a new one. A log that fences
// nothing, or cannot tell the epoch, leaves the calls as they were.
func (n *Node) ownsCall(ctx context.Context, sessionID string, requested eventlog.Lease) error {
	lease := requested
	backoff := 50 * time.Millisecond
	for {
		// Checked again after every wait: a read that confirmed the lease's epoch
		// in the log does not tell that the node still holds it (a revoke may have
		// handed its sessions over, or dropped it, while the read ran: the next
		// owner takes its epoch only once the revoke is done).
		if held, ok := n.ownedLease(sessionID); !ok || held != requested {
			n.metrics.fenced.Inc()
			return fmt.Errorf("%w: session %s: node %s no longer holds the lease its call was requested under (%v)", eventlog.ErrFenced, sessionID, n.cfg.NodeID, requested)
		}
		if n.leased.epochs == nil {
			return nil
		}
		_, doubt, lost := n.pauses.doubts(lease.Partition)
		if lost {
			if err := n.awaitEviction(ctx, lease, sessionID); err != nil {
				return err
			}
			continue // kept: in doubt only
		}
		if !doubt {
			return nil
		}
		err := n.awaitConfirmation(ctx, lease, sessionID)
		switch {
		case err == nil:
			continue // confirmed as of the read: unless the process paused since
		case errors.Is(err, eventlog.ErrFenced) || ctx.Err() != nil:
			return err
		}
		n.cfg.Logger.Warn("cannot confirm the ownership of a session's partition after a pause of the process: its call waits", "node", n.cfg.NodeID, "session", sessionID, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("session %s: ownership of its partition not confirmed: %w", sessionID, context.Cause(ctx))
		}
		backoff = min(2*backoff, time.Second)
	}
}

// awaitEviction holds a call of a partition the node counts lost after a pause of
// evictedAfter or more until the group tells whether it evicted the node: a
// revoke of the generation the call's lease belongs to (the group evicted it, or
// rebalanced anyway: the lease's sessions are handed over, and the call fails, not
// started), or none within keptAfter of the wake (the group kept the node, whose
// heartbeats it went on answering: an evicted member learns so at its next
// heartbeat, a second after it runs again, and its revoke follows once its
// partition windows settled their messages in flight, within the rebalance
// timeout). Kept, the partition is in doubt only,
// and the log's epoch decides, as after a shorter pause. Before, such a call
// failed at once: after a pause between evictedAfter and the group's session
// timeout, which the group may not count against the node, its sessions' calls
// never started again, and the sessions waited for a rebalance that did not come.
func (n *Node) awaitEviction(ctx context.Context, lease eventlog.Lease, sessionID string) error {
	n.own.mu.Lock()
	gen, revoked := n.own.generation, n.own.revoked
	n.own.mu.Unlock()
	evicted := func() error {
		n.metrics.fenced.Inc()
		return fmt.Errorf("%w: session %s: node %s stopped running for about the group's session timeout, and its partitions were revoked since: it owns partition %d again only once assigned it again",
			eventlog.ErrFenced, sessionID, n.cfg.NodeID, lease.Partition)
	}
	if revoked == nil {
		return evicted() // revoked already, and not assigned again
	}
	evictions, left := n.pauses.sinceEviction()
	n.metrics.awaitingOwnership.Inc()
	defer n.metrics.awaitingOwnership.Dec()
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-revoked:
		return evicted()
	case <-ctx.Done():
		return fmt.Errorf("session %s: ownership of its partition not confirmed after a pause of the process: %w", sessionID, context.Cause(ctx))
	case <-t.C:
	}
	n.own.mu.Lock()
	same := n.own.generation == gen
	n.own.mu.Unlock()
	if l, ok := n.ownedLease(sessionID); !same || !ok || l != lease {
		return evicted()
	}
	n.pauses.keep(evictions)
	return nil
}

// awaitConfirmation waits, until ctx ends, for the read of lease's epoch in the
// log under way (confirmLease), or starts one, and returns its outcome.
func (n *Node) awaitConfirmation(ctx context.Context, lease eventlog.Lease, sessionID string) error {
	n.metrics.awaitingOwnership.Inc()
	defer n.metrics.awaitingOwnership.Dec()
	read := n.pauses.reads.DoChan(lease.String(), func() (any, error) { return nil, n.confirmLease(lease, sessionID) })
	select {
	case r := <-read:
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("session %s: ownership of its partition not confirmed: %w", sessionID, context.Cause(ctx))
	}
}

// confirmLease reads the current epoch of lease's partition in the log, for the
// calls of its sessions that doubt it after a pause (ownsCall; sessionID is the
// first of them), and confirms the partition if it is still lease's. A read is
// bounded by leaseWait, and belongs to no call: one whose context ends leaves
// it to the others.
func (n *Node) confirmLease(lease eventlog.Lease, sessionID string) error {
	mark, doubt, _ := n.pauses.doubts(lease.Partition)
	if !doubt {
		return nil // confirmed by a read that just ended
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseWait)
	defer cancel()
	err := n.leased.current(ctx, lease, sessionID, "call not started after a pause of the process: another node owns the session's partition now")
	if err != nil {
		return err
	}
	n.pauses.confirm(mark, lease.Partition)
	return nil
}

// ownedLease returns the node's lease of the session's partition, unless the node
// was fenced on that partition under it (fencedOut), or handed its sessions over
// (drainSessions: they stopped, and the lease is only kept for the release).
func (n *Node) ownedLease(sessionID string) (eventlog.Lease, bool) {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	l := n.own.lease
	if l.epoch == 0 || l.total <= 0 || l.drained {
		return eventlog.Lease{}, false
	}
	p := n.cfg.Bus.Partition(sessionID, l.total)
	if !l.partitions[p] {
		return eventlog.Lease{}, false
	}
	if f := n.own.fenced.Load(); f != nil && f.gen == l.gen && f.parts[p] {
		return eventlog.Lease{}, false
	}
	return eventlog.Lease{Partition: p, Epoch: l.epoch}, true
}
