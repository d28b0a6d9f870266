package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/troupe-run/troupe/actors"
)

// Publication marks. A sharded node that takes partitions over from an owner that
// did not release them (killed with SIGKILL, fenced) publishes again the latest
// task of each of their sessions that ended lately (resumeOwned): the owner may have
// appended events it never published. Without more, "lately" is republishWindow, ten
// minutes, and every result of those ten minutes reached troupe.results twice. So
// an owner marks in the log, every Config.PublishMarkInterval while its sessions
// append, the time T before which it has published every event of its partitions'
// sessions (eventlog.Releasing.MarkPublished), and the next owner publishes again
// only the sessions whose latest event is stamped at or after T - markMargin.
//
// T is taken on the clock that stamps the events (Config.Clock), in the process
// that stamps them:
//
//   - Each batch a session actor appends is bracketed (actors.SessionDeps.Stamping
//     and Handed): before it stamps the batch's new events, the session is pending
//     since the earlier of the clock's reading and the earliest TS of the events
//     the batch holds already; once the outbox was handed the batch, it is pending
//     no more. A batch whose append failed (it may be stored all the same) stays
//     pending until the session's next step, but one the log refused as fenced
//     (eventlog.ErrFenced) is pending no more: its session's actor stops, and
//     never takes the next step that would end it, so the mark would stay before
//     that batch for as long as the node runs. The refusal shows that another
//     node took the partition under a later epoch, and read this node's record
//     as it was then (Releasing.TakeOver): a mark this node makes after it, at
//     its older epoch, leaves that partition as it is, so it cannot make the new
//     owner publish less; the batch is the new owner's to publish. A session
//     whose actor was stopped while it retried a write (its partitions revoked,
//     the node closing) stays pending too: the hand-over reads it (handOver does
//     not release its partition cleanly, but marks it before the batch, which may
//     be stored all the same and is not published), and then forgets it
//     (dropLease), so that it holds back no mark of the partitions the node
//     takes later.
//   - A mark round reads, at once, T = the earliest of the clock's reading and of
//     every pending session's time, then waits until the outbox published
//     everything queued before (outbox.Flush), then records T. A batch stamped
//     before T was handed to the outbox before the reading, so it was published
//     when Flush returned; one still pending then has every event stamped at or
//     after T; one that started later stamps after the reading.
//   - The sessions a node publishes again when it takes partitions (resumeOwned)
//     are handed to the outbox before their resumption ends. Until it ended, a
//     partition is marked no later than what its previous owner left to publish
//     again (nothing if that owner released it, its mark less markMargin if it
//     marked it), and not at all if that owner did neither, so that those are
//     published too; the hand-over does the same (handOver).
//
// Only one node's clock is involved: the owner stamps the events and reads T,
// and the next owner compares T with the latest TS of each session (the log's
// SessionInfo.UpdatedUS, which is at least that of the owner's own events; events
// another owner stamped before were published, or republished and so covered).
// markMargin covers that clock stepping back (an NTP correction) between a
// stamp and a mark: a step larger than it may lose a result a crash left
// unpublished, as before marks a crash more than republishWindow old did.
//
// What the owner published after its last mark, most of what the next owner
// would publish again, the next owner finds on the bus and publishes no more
// (onbus.go).

// markMargin is subtracted from a previous owner's mark before its sessions are
// compared with it: the owner's clock may step back between a stamp and a mark.
const markMargin = 2 * time.Second

// publicationMarks tracks the batches the session actors are appending and
// handing to the outbox. It is safe for concurrent use.
type publicationMarks struct {
	clock actors.Clock
	mu    sync.Mutex
	// pending is, per session whose batch was stamped and not handed to the
	// outbox yet, the earliest time its events may be stamped with.
	pending map[string]int64
	// changed is set when a batch was stamped since the last mark round.
	changed bool
	// epoch and through are the lease the node marked last, and its mark.
	epoch   uint64
	through int64
}

// stamping notes that session is about to stamp and append a batch, holding
// events stamped at earliest already (math.MaxInt64: none).
func (m *publicationMarks) stamping(session string, earliest int64) {
	now := m.clock.Now().UnixMicro()
	m.mu.Lock()
	defer m.mu.Unlock()
	since := min(now, earliest)
	if old, ok := m.pending[session]; ok {
		since = min(since, old)
	}
	if m.pending == nil {
		m.pending = map[string]int64{}
	}
	m.pending[session] = since
	m.changed = true
}

// handed notes that session handed its batch to the outbox.
func (m *publicationMarks) handed(session string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, session)
}

// strandedIn returns, per partition of held, the earliest time of its sessions
// still pending: sessions whose actors stopped while they retried a write
// (actors' errStopped), once every actor of the lease stopped (handOver).
func (m *publicationMarks) strandedIn(held lease, partition func(string, int) int) map[int]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var stranded map[int]int64
	for session, since := range m.pending {
		p := partition(session, held.total)
		if !held.partitions[p] {
			continue
		}
		if stranded == nil {
			stranded = map[int]int64{}
		}
		if old, ok := stranded[p]; !ok || since < old {
			stranded[p] = since
		}
	}
	return stranded
}

// forget drops the pending sessions of held's partitions: their actors stopped,
// and the lease was handed over (handOver read them). A session of a partition
// the node no longer owns holds none of its later marks back.
func (m *publicationMarks) forget(held lease, partition func(string, int) int) {
	if len(held.partitions) == 0 || held.total <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for session := range m.pending {
		if held.partitions[partition(session, held.total)] {
			delete(m.pending, session)
		}
	}
}

// low returns the earliest of now and every pending session's time, and whether
// anything was stamped since the last call, which it forgets.
func (m *publicationMarks) low() (int64, bool) {
	now := m.clock.Now().UnixMicro()
	m.mu.Lock()
	defer m.mu.Unlock()
	low := now
	for _, since := range m.pending {
		low = min(low, since)
	}
	changed := m.changed
	m.changed = false
	return low, changed
}

// unmarked notes that a round read low but recorded nothing.
func (m *publicationMarks) unmarked() {
	m.mu.Lock()
	m.changed = true
	m.mu.Unlock()
}

// markPublished runs one mark round (see above) for the node's lease, and
// reports whether it recorded a mark. Before the lease's resumption ended, a
// partition is marked no later than what its previous owner left to publish
// again, and one that owner neither released nor marked is not marked. It marks
// nothing without a lease, when the lease was marked already and nothing was
// stamped since, when the outbox does not publish within wait, or when the mark
// would not be above the last one.
func (n *Node) markPublished(wait time.Duration) bool {
	if n.leased == nil || n.leased.releasing == nil || n.outbox == nil {
		return false
	}
	n.own.mu.Lock()
	held := n.own.lease
	resumed := n.own.resumed == held.gen
	n.own.mu.Unlock()
	if held.epoch == 0 || len(held.partitions) == 0 {
		return false
	}
	through, changed := n.marks.low()
	n.marks.mu.Lock()
	fresh, last := n.marks.epoch != held.epoch, n.marks.through
	n.marks.mu.Unlock()
	if !fresh && (!changed || through <= last) {
		if changed {
			n.marks.unmarked()
		}
		return false
	}
	if through <= 0 {
		n.marks.unmarked()
		return false
	}
	if !n.outbox.Flush(wait) {
		n.marks.unmarked() // a broker outage: the mark stays where it is
		return false
	}
	// Until the lease's resumption has ended, a partition is marked no later than
	// what its previous owner left to publish again (lease.inheritedBefore), and
	// not at all when that owner neither released nor marked it.
	marks := map[int64][]int{}
	for p := range held.partitions {
		at := through
		if !resumed {
			at = min(at, held.inheritedBefore(p))
		}
		if at > 0 {
			marks[at] = append(marks[at], p)
		}
	}
	if len(marks) == 0 {
		n.marks.unmarked()
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseWait)
	defer cancel()
	for at, partitions := range marks {
		slices.Sort(partitions)
		if err := n.leased.releasing.MarkPublished(ctx, n.cfg.NodeID, held.epoch, partitions, at); err != nil {
			n.marks.unmarked()
			n.cfg.Logger.Warn("cannot mark in the event log what the node published; a next owner publishes more again",
				"node", n.cfg.NodeID, "partitions", partitions, "epoch", held.epoch, "err", err)
			return false
		}
	}
	n.marks.mu.Lock()
	n.marks.epoch, n.marks.through = held.epoch, through
	n.marks.mu.Unlock()
	n.metrics.marks.Inc()
	return true
}

// markEvery runs a mark round every interval until the node stops.
func (n *Node) markEvery(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.stopping:
			return
		case <-t.C:
			n.markPublished(interval)
		}
	}
}
