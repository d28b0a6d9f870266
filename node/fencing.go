package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// fences. A session appends under the lease its partition had when the session
// folded its events (the session actor's Read from seq 1), so that an actor
// outliving its node's ownership (which Revoked prevents) is fenced too.
type leasedStore struct {
	n       *Node
	fencing eventlog.Fencing

	mu    sync.Mutex
	bound map[string]eventlog.Lease // by session; cleared when the node's partitions are revoked
}

var _ actors.EventStore = (*leasedStore)(nil)

func newLeasedStore(n *Node, f eventlog.Fencing) *leasedStore {
	return &leasedStore{n: n, fencing: f, bound: map[string]eventlog.Lease{}}
}

// Read reads the log; a read from the first seq is a session folding its events,
// which binds the session to the current lease of its partition.
func (s *leasedStore) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	if fromSeq <= 1 {
		lease, ok := s.n.leaseOf(sessionID)
		s.mu.Lock()
		if ok {
			s.bound[sessionID] = lease
		} else {
			delete(s.bound, sessionID)
		}
		s.mu.Unlock()
	}
	return s.n.log.Read(ctx, sessionID, fromSeq)
}

// Append appends a session's batch under the lease the session folded under.
func (s *leasedStore) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) == 0 {
		return nil
	}
	id := events[0].SessionID
	s.mu.Lock()
	lease, ok := s.bound[id]
	s.mu.Unlock()
	if !ok {
		s.n.metrics.fenced.Inc()
		return fmt.Errorf("%w: session %s: node %s folded it without a lease of its partition", eventlog.ErrFenced, id, s.n.cfg.NodeID)
	}
	err := s.fencing.AppendLeased(ctx, lease, events)
	if errors.Is(err, eventlog.ErrFenced) {
		s.n.metrics.fenced.Inc()
		s.n.cfg.Logger.Warn("append refused: another node owns the session's partition now", "node", s.n.cfg.NodeID, "session", id, "err", err)
	}
	return err
}

// release forgets every session's lease: the node's partitions were revoked and
// its session actors stopped.
func (s *leasedStore) release() {
	s.mu.Lock()
	clear(s.bound)
	s.mu.Unlock()
}

// leaseOf returns the node's current lease of the session's partition.
func (n *Node) leaseOf(sessionID string) (eventlog.Lease, bool) {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	if n.own.total <= 0 || n.own.epoch == 0 {
		return eventlog.Lease{}, false
	}
	p := n.cfg.Bus.Partition(sessionID, n.own.total)
	if !n.own.partitions[p] {
		return eventlog.Lease{}, false
	}
	return eventlog.Lease{Partition: p, Epoch: n.own.epoch}, true
}

// takeLeases records this node as the owner of partitions in the log, under a new
// epoch, for generation gen; within wait, or, with wait 0, until it succeeds or
// the generation ended. It reports whether the epoch is the node's now.
func (n *Node) takeLeases(gen int64, partitions []int, wait time.Duration) bool {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if wait > 0 {
		ctx, cancel = context.WithTimeout(ctx, wait)
	}
	defer cancel()
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if !n.isGeneration(gen) {
			return false
		}
		epoch, err := n.leased.fencing.Own(ctx, n.cfg.NodeID, partitions)
		if err == nil {
			n.own.mu.Lock()
			current := n.own.generation == gen
			if current {
				n.own.epoch = epoch
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
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false
		case <-n.stopping:
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
