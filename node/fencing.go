package node

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// stays on the bus for the new owner.

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
}

var _ actors.EventStore = (*leasedStore)(nil)

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
	}
	return err
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
	epoch      uint64
	partitions map[int]bool
	total      int
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

// dropLease forgets the node's lease: its partitions were revoked and its session
// actors stopped.
func (n *Node) dropLease() {
	n.own.mu.Lock()
	n.own.lease = lease{}
	n.own.mu.Unlock()
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
		epoch, err := n.leased.fencing.Own(ctx, n.cfg.NodeID, partitions)
		cancel()
		if err == nil {
			n.own.mu.Lock()
			current := n.own.generation == gen
			if current {
				n.own.lease = lease{epoch: epoch, partitions: n.own.partitions, total: n.own.total}
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
