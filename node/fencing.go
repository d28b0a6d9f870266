package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Fencing in a cluster (eventlog.Fencing). When Kafka assigns a sharded node
// partitions of troupe.tasks, the node takes their next ownership epoch in the
// shared log (Assigned, before any of their sessions runs), and its session actors
// append under it. A node that hung past the group's session timeout, and so lost
// its partitions without knowing, finds its appends refused with ErrFenced once the
// new owner took them: the session actor stops instead of retrying, and its task
// stays on the bus for the new owner. A call its sessions asked for starts only
// while the node holds the lease of its partition, checked as the call is about
// to start, and, after a pause of the process, confirmed in the log first
// (ownsCall, pausewatch.go).

// leaseWait bounds how long Assigned waits for the log to record the node's new
// epoch: Kafka delivers the generation's tasks only after Assigned returned. If
// the log does not answer in time, the node keeps trying in the background and
// runs the partitions' sessions once it succeeds.
const leaseWait = 5 * time.Second

// leasedStore is the event store of a sharded node's session actors when its log
// fences: it appends under the node's lease of the session's partition. The lease
// lasts from the node's Own (Assigned) until its session actors stopped (the end of
// Revoked), so that a session draining its effects while its partition is revoked
// still records their results; no session actor outlives it, since Revoked stops
// them all before the next Assigned.
type leasedStore struct {
	eventlog.Log
	n       *Node
	fencing eventlog.Fencing
	// releasing records the node's clean releases of its partitions, and reads
	// those of their previous owners; nil when the log does not (every takeover
	// then publishes the ended sessions' latest tasks again).
	releasing eventlog.Releasing
	// epochs reads a partition's current epoch, which a session starting checks
	// against the node's lease (stillOwned); nil when the log cannot tell it.
	epochs eventlog.EpochReading
}

var (
	_ actors.EventStore   = (*leasedStore)(nil)
	_ eventlog.PageReader = (*leasedStore)(nil)
)

// ReadN reads a page of a session through the log (eventlog.PageReader), as
// Read reads it: a read takes no lease. Without it the store hid the log's
// paged reads, and the session actors' bounded reads (the event at a fold
// snapshot's seq) read the rest of the session on a node of a cluster.
func (s *leasedStore) ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	return readN(ctx, s.Log, sessionID, fromSeq, n, maxBytes)
}

// Append appends a session's batch under the node's lease of its partition.
func (s *leasedStore) Append(ctx context.Context, events []messages.Envelope) error {
	return s.leased(ctx, events, s.fencing.AppendLeased)
}

// leased runs write, AppendLeased or ClaimLeased, under the node's lease of the
// partition of the batch's session.
func (s *leasedStore) leased(ctx context.Context, events []messages.Envelope, write func(context.Context, eventlog.Lease, []messages.Envelope) error) error {
	if len(events) == 0 {
		return nil
	}
	id := events[0].SessionID
	lease, ok := s.n.leaseOf(id)
	if !ok {
		s.n.metrics.fenced.Inc()
		return fmt.Errorf("%w: session %s: node %s holds no lease of its partition", eventlog.ErrFenced, id, s.n.cfg.NodeID)
	}
	err := write(ctx, lease, events)
	if errors.Is(err, eventlog.ErrFenced) {
		s.n.metrics.fenced.Inc()
		s.n.cfg.Logger.Warn("append refused: another node owns the session's partition now", "node", s.n.cfg.NodeID, "session", id, "err", err)
		s.n.fencedOut(lease)
	}
	return err
}

// stillOwned is the session actors' StillOwned (actors.SessionDeps): called once a
// session starting on this node has read its events, before it re-issues the
// effects in flight among them, it reads its partition's current epoch in the log
// (one small query per activation) and fails with ErrFenced when another node took
// the partition since the node's lease, which it then treats as a fenced append
// (fencedOut): no session of the partition starts here again until the next
// assignment. Before, a node woken from a pause past the group's session timeout
// that had no write of a partition refused yet (it had nothing in flight there
// when it froze) started the session of the first task record it read, folded the
// new owner's history and performed the model and tool calls that owner had in
// flight, under the same keys. Every owner records its epoch before it writes, so
// that a read followed by a check that still finds the lease current holds no
// event of a newer owner.
func (s *leasedStore) stillOwned(ctx context.Context, sessionID string) error {
	lease, ok := s.n.leaseOf(sessionID)
	if !ok {
		s.n.metrics.fenced.Inc()
		return fmt.Errorf("%w: session %s: node %s holds no lease of its partition", eventlog.ErrFenced, sessionID, s.n.cfg.NodeID)
	}
	return s.current(ctx, lease, sessionID, "session not started: another node owns the session's partition now")
}

// current reads the current epoch of lease's partition in the log, and fails with
// ErrFenced when another node took the partition since lease (the session's,
// sessionID), which it logs with why and treats as a fenced append (fencedOut).
func (s *leasedStore) current(ctx context.Context, lease eventlog.Lease, sessionID, why string) error {
	current, err := s.epochs.CurrentEpoch(ctx, lease.Partition)
	if err != nil {
		return err
	}
	if current <= lease.Epoch {
		return nil
	}
	err = fmt.Errorf("%w: session %s: partition %d is at epoch %d, above this node's lease (%d): another node took it", eventlog.ErrFenced, sessionID, lease.Partition, current, lease.Epoch)
	s.n.metrics.fenced.Inc()
	s.n.cfg.Logger.Warn(why, "node", s.n.cfg.NodeID, "session", sessionID, "err", err)
	s.n.fencedOut(lease)
	return err
}

// fencedOut records that the node's lease l was taken by another node (an append
// under it was fenced): until the next assignment, the host starts no session of
// its partition (runAssigned's owns). Before, a node woken from a pause past the
// group's session timeout, still believing it held its partitions, started a
// fenced session again for the task record it retried: the actor folded the new
// owner's events and performed the model and tool calls that owner had in flight,
// under the same keys, before its next append was fenced.
func (n *Node) fencedOut(l eventlog.Lease) {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	held := n.own.lease
	if held.epoch != l.Epoch || !held.partitions[l.Partition] {
		return // a lease taken since, or the partition was given up
	}
	parts := map[int]bool{l.Partition: true}
	since := time.Now()
	f := n.own.fenced.Load()
	if f != nil && f.gen == held.gen {
		for p := range f.parts {
			parts[p] = true
		}
		since = f.since
	}
	n.own.fenced.Store(&fencedPartitions{gen: held.gen, parts: parts, since: since})
	if f == nil || f.gen != held.gen {
		gen := held.gen
		time.AfterFunc(strandedAfter, func() {
			if err := n.stranded(); err != nil && n.isGeneration(gen) && !n.closing() {
				n.cfg.Logger.Error("partitions stranded", "node", n.cfg.NodeID, "err", err)
			}
		})
	}
}

// strandedAfter is how long a node's group may leave it holding partitions whose
// lease another node took before the node says so (stranded): the group's
// rebalance timeout, within which a node the group evicted (a pause past its
// session timeout) is told of its revoke (pausewatch.go).
const strandedAfter = groupRebalanceTimeout

// stranded returns why the node runs none of the sessions of some partitions it
// holds, or nil: another node took their lease (an append or a session's start
// was fenced) and the node's consumer group has not moved them for strandedAfter
// since, so no rebalance will. The other node is no member of the group: a node
// started with another --group, or in another cluster (another --topic-prefix)
// on the same event log. Until the group's next rebalance (a restart of the
// node, or a member joining or leaving), their tasks wait on the bus for the
// node, which refuses them; once the other node stopped, nothing runs them.
// Before, such a node said nothing: its /healthz answered ok, and once the other
// node was gone its partitions' tasks waited for ever.
func (n *Node) stranded() error {
	parts, held := n.strandedPartitions()
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("partitions %v of %s, which this node's consumer group assigns to it, were taken by another node %s ago, "+
		"and the group has not moved them since: a node outside the group (started with another --group, or another --topic-prefix "+
		"on the same event log) takes the same partitions; this node runs none of their tasks until its group's next rebalance: "+
		"stop the other node, then restart this one", parts, messages.TopicTasks, held.Round(time.Second))
}

// strandedPartitions returns the partitions stranded says the node holds
// without running them, in order, and since when (nil if none).
func (n *Node) strandedPartitions() (parts []int, held time.Duration) {
	f, h := n.own.fenced.Load(), n.own.held.Load()
	if f == nil || h == nil || h.gen != f.gen {
		return nil, 0 // not fenced, or assigned anew since
	}
	held = time.Since(f.since)
	if held < strandedAfter {
		return nil, 0
	}
	parts = make([]int, 0, len(f.parts))
	for p := range f.parts {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return parts, held
}

// strandedGauge exports troupe_cluster_partitions_stranded (strandedPartitions),
// read at each scrape: /healthz says it with a 200 (degraded), which no load
// balancer acts on, so that an alert has a metric to watch besides the error log.
func strandedGauge(n *Node) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "cluster", Name: "partitions_stranded",
		Help: "Partitions of troupe.tasks this node's consumer group assigns to it whose lease another node took, the group's rebalance timeout (30 s) ago or more, without a rebalance since: a node outside the group (another --group, or another --topic-prefix on the same event log) runs them, and this node none of their tasks until its group's next rebalance. 0 otherwise."},
		func() float64 {
			parts, _ := n.strandedPartitions()
			return float64(len(parts))
		})
}

// leasedClaims is a leasedStore whose log also claims sessions (eventlog.Claiming):
// a session actor claims its session under the lease (ClaimLeased), and starts a
// task without reading the log if the session has no events.
type leasedClaims struct {
	*leasedStore
	claims eventlog.Claiming
}

var _ actors.ClaimingStore = leasedClaims{}

// Claim claims a session under the node's lease of its partition.
func (s leasedClaims) Claim(ctx context.Context, events []messages.Envelope) error {
	return s.leased(ctx, events, s.claims.ClaimLeased)
}

// lease is a sharded node's claim on its partitions in a log that fences.
type lease struct {
	gen        int64 // the generation it was taken for
	epoch      uint64
	partitions map[int]bool
	total      int
	// released and before are what the partitions' previous owners left this
	// lease to publish again (releasedPartitions): nothing for a partition they
	// released cleanly, the sessions that ended at or after before[p] for one they
	// marked, every one that ended lately for the others. Until the lease's
	// resumption has finished, its own release or mark can promise no more
	// (inheritedBefore).
	released map[int]bool
	before   map[int]int64
	// drained is set once its sessions were handed over (drainSessions): no call
	// of theirs starts from then on (ownedLease), although the lease is kept
	// until its release was recorded (Revoked's dropLease).
	drained bool
}

// inheritedBefore returns, for partition p of the lease, the time at or after which
// sessions that ended may still be owed a publication by a previous owner while the
// lease's resumption has not finished: math.MaxInt64 when the previous owner
// released p cleanly (nothing owed), its mark (less markMargin) when it marked p,
// and 0 when it did neither (every session that ended lately may be owed).
func (l lease) inheritedBefore(p int) int64 {
	switch {
	case l.released[p]:
		return math.MaxInt64
	case l.before[p] > 0:
		return l.before[p]
	}
	return 0
}

// leaseOf returns the node's lease of the session's partition.
func (n *Node) leaseOf(sessionID string) (eventlog.Lease, bool) {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	l := n.own.lease
	if l.epoch == 0 || l.total <= 0 {
		return eventlog.Lease{}, false
	}
	p := n.cfg.Bus.Partition(sessionID, l.total)
	if !l.partitions[p] {
		return eventlog.Lease{}, false
	}
	return eventlog.Lease{Partition: p, Epoch: l.epoch}, true
}

// dropLease forgets the node's lease, held: its partitions were revoked and its
// session actors stopped. The publication marks forget the sessions of held still
// pending (stopped while they retried a write): the hand-over read them.
func (n *Node) dropLease(held lease) {
	n.own.mu.Lock()
	n.own.lease = lease{}
	n.own.mu.Unlock()
	n.marks.forget(held, n.cfg.Bus.Partition)
}

// takeLeases records this node as the owner of partitions in the log, under a new
// epoch, for generation gen: until deadline (none if zero), or until it succeeds,
// the generation is revoked or the node stops. It reports whether the epoch is the
// node's lease now. Each Own runs to its end (at most leaseWait): an Own given up
// midway may still be recorded, and would then fence the partitions' next owner.
func (n *Node) takeLeases(gen int64, partitions []int, deadline time.Time, revoked <-chan struct{}) bool {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if !n.isGeneration(gen) {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseWait)
		mark := n.pauses.mark()
		epoch, released, before, err := n.takeOver(ctx, partitions)
		cancel()
		if err == nil {
			n.own.mu.Lock()
			current := n.own.generation == gen
			if current {
				n.own.lease = lease{gen: gen, epoch: epoch, partitions: n.own.partitions, total: n.own.total, released: released, before: before}
				n.own.released, n.own.publishedBefore = released, before
				// The partitions' current epoch is the new lease's: no call of
				// their sessions doubts it for a pause before (ownsCall).
				n.pauses.renew(mark, partitions...)
			}
			n.own.mu.Unlock()
			if current {
				n.metrics.epoch.Set(float64(epoch))
				n.cfg.Logger.Info("took ownership of partitions", "node", n.cfg.NodeID, "partitions", partitions, "epoch", epoch)
			}
			return current
		}
		n.cfg.Logger.Warn("cannot take ownership of assigned partitions in the event log; their sessions wait", "node", n.cfg.NodeID,
			"partitions", partitions, "attempt", attempt, "err", err)
		wait := time.NewTimer(backoff)
		select {
		case <-wait.C:
		case <-expired:
			wait.Stop()
			return false
		case <-revoked:
			wait.Stop()
			return false
		case <-n.stopping:
			wait.Stop()
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (n *Node) isGeneration(gen int64) bool {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	return n.own.generation == gen
}

// takeOver records this node as the owner of partitions under a new epoch
// (eventlog.Fencing.Own) and returns it, with what the partitions' previous
// owners left it to publish again (releasedPartitions). With a log that records
// releases, that is read from the owner records the new epoch superseded
// (eventlog.Releasing.TakeOver), not from a read before it: another node that
// believed it owned a partition may have taken it in between, ended sessions and
// died without releasing it, and their results would never be published. With a
// log that does not, every partition is left to publish again.
func (n *Node) takeOver(ctx context.Context, partitions []int) (epoch uint64, released map[int]bool, before map[int]int64, err error) {
	if n.leased.releasing == nil {
		epoch, err = n.leased.fencing.Own(ctx, n.cfg.NodeID, partitions)
		return epoch, nil, nil, err
	}
	epoch, previous, err := n.leased.releasing.TakeOver(ctx, n.cfg.NodeID, partitions)
	if err != nil {
		return 0, nil, nil, err
	}
	released, before = n.releasedPartitions(partitions, previous)
	return epoch, released, before, nil
}

// releasedPartitions returns those of partitions whose previous owner (owners,
// the records this node's epoch superseded) released them cleanly, and for the
// others the time before which that owner published everything (its publication
// mark, pubmark.go, less markMargin). A partition without a previous owner has
// neither: its next owner publishes its ended sessions' latest tasks again,
// duplicates rather than a loss.
func (n *Node) releasedPartitions(partitions []int, owners map[int]eventlog.Ownership) (released map[int]bool, before map[int]int64) {
	released, before = map[int]bool{}, map[int]int64{}
	var from, marked []string
	for _, p := range partitions {
		o, ok := owners[p]
		switch {
		case !ok:
		case o.ReleasedUS > 0:
			released[p] = true
			from = append(from, fmt.Sprintf("%d:%s@%d", p, o.Node, o.Epoch))
		case o.PublishedUS > 0:
			before[p] = o.PublishedUS - markMargin.Microseconds()
			marked = append(marked, fmt.Sprintf("%d:%s@%d:%s", p, o.Node, o.Epoch, time.UnixMicro(o.PublishedUS).UTC().Format(time.RFC3339Nano)))
		}
	}
	if len(from) > 0 {
		n.cfg.Logger.Info("partitions released cleanly by their previous owners: their ended sessions are not published again",
			"node", n.cfg.NodeID, "released", from)
	}
	if len(marked) > 0 {
		n.cfg.Logger.Info("partitions left unreleased by their previous owners, which marked what they published: only the sessions that ended after the mark are published again",
			"node", n.cfg.NodeID, "marked", marked)
	}
	return released, before
}

// handOver records, once per lease, that this node released the partitions of
// held cleanly (eventlog.Releasing): called once their session actors stopped
// (Revoked, or Close), it waits up to Config.HandoffGrace for the outbox to publish
// everything they handed it, then marks the partitions released at the lease's
// epoch. When the resumption of the lease's generation had not finished, sessions
// a previous owner left unpublished may not be published yet: of the partitions,
// it releases those their previous owner had released (nothing was owed), marks
// those it had marked at no later than that mark (eventlog.Releasing.MarkPublished),
// and leaves the others as they are. A partition of a session whose actor was
// stopped while it retried a write (still pending in the publication marks,
// pubmark.go) is marked before that write, not released: it may be stored and is
// not published. It marks nothing when the outbox cannot
// publish in time (a broker outage), or when the log does not record releases: the
// partitions' next owners then publish again the latest tasks of the sessions that
// ended lately, as after a crash.
//
// Its waits end by deadline too (Revoked's budget; none when zero). It reports false
// when deadline cut it short, before it recorded everything it meant to.
func (n *Node) handOver(held lease, deadline time.Time) bool {
	if held.epoch == 0 || n.leased == nil || n.leased.releasing == nil {
		return true
	}
	wait := func(d time.Duration) time.Duration {
		if deadline.IsZero() {
			return d
		}
		return within(deadline, d)
	}
	cut := func() bool { return !deadline.IsZero() && !time.Now().Before(deadline) }
	n.own.mu.Lock()
	done := n.own.handedOver == held.epoch
	n.own.handedOver = held.epoch
	complete := n.own.resumed == held.gen
	n.own.mu.Unlock()
	if done {
		return true
	}
	partitions := make([]int, 0, len(held.partitions))
	for p := range held.partitions {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)
	if len(partitions) == 0 {
		return true
	}
	unmarked := func(why string, args ...any) {
		n.metrics.unreleased.Inc()
		n.cfg.Logger.Warn("partitions handed over without a clean release: their next owners publish their lately ended sessions again; "+why,
			append([]any{"node", n.cfg.NodeID, "partitions", partitions, "epoch", held.epoch}, args...)...)
	}
	// A resumption that has not finished may leave unpublished what the
	// partitions' previous owners left to publish again, and no more: the
	// unfinished sessions it did not resume are resumed by the next owner anyway,
	// and everything this node appended is in its outbox. A partition its
	// previous owner released cleanly owed nothing, so it is released all the
	// same; one it marked is marked (at most at that mark); one it did neither
	// stays as it is (its next owner publishes every session that ended lately).
	// A session still pending stopped while it retried a write (its actor was
	// stopped): the batch may be stored all the same, and is not published, so
	// its partition is marked before it rather than released.
	stranded := n.marks.strandedIn(held, n.cfg.Bus.Partition)
	var why []string
	if !complete {
		why = append(why, "the sessions to resume after the assignment were not all resumed")
	}
	if len(stranded) > 0 {
		why = append(why, "sessions stopped with a write unfinished, which may be stored and is not published")
	}
	var release []int
	var owed map[int64][]int
	for _, p := range partitions {
		before := int64(math.MaxInt64)
		if at, ok := stranded[p]; ok {
			before = at
		}
		if !complete {
			before = min(before, held.inheritedBefore(p))
		}
		switch {
		case before == math.MaxInt64:
			release = append(release, p)
		case before > 0:
			if owed == nil {
				owed = map[int64][]int{}
			}
			owed[before] = append(owed[before], p)
		}
	}
	if len(release) == 0 && len(owed) == 0 {
		unmarked(strings.Join(why, "; "))
		return true
	}
	if grace := wait(n.cfg.HandoffGrace); !n.outbox.Flush(grace) {
		unmarked("the bus did not take the sessions' events in time", "waited", grace)
		return !cut()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait(leaseWait))
	defer cancel()
	if len(owed) > 0 {
		// Everything appended before low was published (the outbox is flushed);
		// what the previous owners left after their marks may not be, nor what
		// a session stopped mid-write holds.
		low, _ := n.marks.low()
		for before, ps := range owed {
			if err := n.leased.releasing.MarkPublished(ctx, n.cfg.NodeID, held.epoch, ps, min(low, before)); err != nil {
				unmarked("the log did not record the publication mark", "err", err)
				return !cut()
			}
		}
	}
	if left := len(partitions) - len(release); left > 0 {
		unmarked(strings.Join(why, "; ")+": the partitions that may owe a publication are marked before it, or left as they are", "released", release)
	}
	if len(release) == 0 {
		return true
	}
	if err := n.leased.releasing.Release(ctx, n.cfg.NodeID, held.epoch, release, time.Now().UnixMicro()); err != nil {
		unmarked("the log did not record the release", "err", err)
		return !cut()
	}
	n.metrics.released.Add(float64(len(release)))
	n.cfg.Logger.Info("partitions released cleanly", "node", n.cfg.NodeID, "partitions", release, "epoch", held.epoch)
	return true
}

// closeHandOver hands over the lease of a sharded node that closes while it still
// holds one (Close, once the host and its sessions stopped: Revoked did not run
// yet, or did not finish), and then lets a Revoked that waits for it return.
func (n *Node) closeHandOver() {
	defer close(n.handedOver)
	if !n.sharded() || n.host == nil {
		return
	}
	n.own.mu.Lock()
	held := n.own.lease
	n.own.mu.Unlock()
	n.handOver(held, time.Time{})
}
