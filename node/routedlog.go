package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools/notes"
)

// The streams a sharded cluster routes to one owner as it routes sessions: a
// memory namespace (memory/<namespace>, memoryroute.go), a knowledge base
// (kb/<name>, knowledgeroute.go) and an agent's notes (notes/<agent>,
// notesroute.go) are written only by the node that owns their stream's
// partition of troupe.tasks, where their commands travel. A node that hung past
// the group's session timeout (SIGSTOP) lost those partitions without knowing,
// and when it wakes it may still run a command it had read: written with a plain
// Append, its change would race the new owner's at the stream's next seq, and
// ClickHouse, which cannot refuse a second event at one (stream, seq)
// atomically, would lose one of two writes that were both acknowledged. So on a
// sharded node whose log fences (eventlog.Fencing), the memory, the knowledge
// bases, the notes tool and the consolidator (through the memory) write on a
// routedLog: an append to a routed stream goes under the node's lease of the
// stream's partition (Node.leaseOf, as a session's: leasedStore), and fails with
// eventlog.ErrFenced, writing nothing, when the node holds no lease of it or a
// newer owner took it. The command whose write was refused is not answered nor
// acknowledged (handleMemoryCommand): it stays on the bus for the partition's
// owner, which runs it. Streams any node writes (configurations, A2A push
// configs, MCP sessions, sign-ins, stored bus messages) never reach a routedLog,
// and one that did would be appended as before, without a lease.

// errNotOwner ends the handling of a command whose write was fenced
// (eventlog.ErrFenced): the node does not own its stream's partition. It is not
// retried here, and not acknowledged: the message stays on the bus for the
// partition's owner.
var errNotOwner = errors.New("this node does not own the stream's partition")

// routedStream reports whether stream is one a sharded cluster routes to the
// owner of its partition.
func routedStream(stream string) bool {
	return memory.IsStream(stream) || knowledge.IsStream(stream) || notes.IsStream(stream)
}

// routedLog is the log of a sharded node's writers of routed streams when the log
// fences: appends to routed streams go under the node's lease of their partition.
// Reads and the other writes pass through.
type routedLog struct {
	eventlog.Log
	n       *Node
	fencing eventlog.Fencing
}

var _ eventlog.Log = (*routedLog)(nil)

// routedCompacting is a routedLog on a log that deletes superseded events
// (eventlog.Compacting): a knowledge base compacts its stream after a write,
// which only the stream's owner may do.
type routedCompacting struct {
	*routedLog
	compacting eventlog.Compacting
}

var _ eventlog.Compacting = (*routedCompacting)(nil)

// routedCompactingCost is a routedCompacting whose log tells the fewest events a
// compaction should delete (eventlog.CompactingCost: ClickHouse).
type routedCompactingCost struct {
	*routedCompacting
	cost eventlog.CompactingCost
}

var _ eventlog.CompactingCost = routedCompactingCost{}

// routedLogOf returns the log the node's writers of routed streams (memory,
// knowledge bases, notes) write on: log itself unless the node shards its
// sessions and log fences, else log with their appends under the partitions'
// lease (routedLog), keeping its compaction if it has one.
func (n *Node) routedLogOf(log eventlog.Log) eventlog.Log {
	if !n.sharded() {
		return log
	}
	f, ok := log.(eventlog.Fencing)
	if !ok {
		return log // sessionStore says once that the log does not fence
	}
	r := &routedLog{Log: log, n: n, fencing: f}
	c, ok := log.(eventlog.Compacting)
	if !ok {
		return r
	}
	rc := &routedCompacting{routedLog: r, compacting: c}
	if cost, ok := log.(eventlog.CompactingCost); ok {
		return routedCompactingCost{routedCompacting: rc, cost: cost}
	}
	return rc
}

// Append appends a batch of routed streams under the node's lease of their
// partition, and any other batch as the log does.
func (l *routedLog) Append(ctx context.Context, events []messages.Envelope) error {
	lease, routed, err := l.leaseFor(events)
	if err != nil || !routed {
		if err != nil {
			return err
		}
		return l.Log.Append(ctx, events)
	}
	err = l.fencing.AppendLeased(ctx, lease, events)
	if errors.Is(err, eventlog.ErrFenced) {
		l.n.metrics.fenced.Inc()
		l.n.cfg.Logger.Warn("append refused: another node owns the stream's partition now", "node", l.n.cfg.NodeID,
			"stream", events[0].SessionID, "err", err)
	}
	return err
}

// leaseFor returns the node's lease of the partition of the batch's routed
// streams (routed false: the batch holds none). A batch that mixes routed streams
// with others, or spans partitions, or whose partition the node holds no lease
// of, is refused, wrapping eventlog.ErrFenced for the last.
func (l *routedLog) leaseFor(events []messages.Envelope) (lease eventlog.Lease, routed bool, err error) {
	if len(events) == 0 || !routedStream(events[0].SessionID) {
		for _, e := range events {
			if routedStream(e.SessionID) {
				return eventlog.Lease{}, false, fmt.Errorf("%w: a batch of streams %s and %s: a routed stream is appended in a batch of its own", eventlog.ErrInvalidEvent, events[0].SessionID, e.SessionID)
			}
		}
		return eventlog.Lease{}, false, nil
	}
	first := events[0].SessionID
	lease, err = l.held(first)
	if err != nil {
		return eventlog.Lease{}, true, err
	}
	for _, e := range events[1:] {
		if e.SessionID == first {
			continue
		}
		other, ok := l.n.leaseOf(e.SessionID)
		if !routedStream(e.SessionID) || !ok || other != lease {
			return eventlog.Lease{}, true, fmt.Errorf("%w: a batch of streams %s and %s: a routed stream is appended in a batch of its own", eventlog.ErrInvalidEvent, first, e.SessionID)
		}
	}
	return lease, true, nil
}

// held returns the node's lease of the partition of a routed stream, or an error
// wrapping eventlog.ErrFenced when it holds none.
func (l *routedLog) held(stream string) (eventlog.Lease, error) {
	lease, ok := l.n.leaseOf(stream)
	if !ok {
		l.n.metrics.fenced.Inc()
		return eventlog.Lease{}, fmt.Errorf("%w: stream %s: node %s holds no lease of its partition (the stream's owner writes it)", eventlog.ErrFenced, stream, l.n.cfg.NodeID)
	}
	return lease, nil
}

// DeleteEvents compacts a routed stream only while the node holds the lease of
// its partition: another node owns it otherwise, and compacts it.
func (l *routedCompacting) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	if routedStream(stream) {
		if _, err := l.held(stream); err != nil {
			return 0, err
		}
	}
	return l.compacting.DeleteEvents(ctx, stream, seqs)
}

func (l routedCompactingCost) CompactMin() int { return l.cost.CompactMin() }
