package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// A node without a shared bus (no Kafka) on a log whose writers race undetected
// (eventlog.SeqRaces: ClickHouse) owns the whole log. Nothing routes its streams
// to it alone: a second such node on the same log (two nodes behind a load
// balancer) would write the same sessions, knowledge bases, memory namespaces
// and notes beside it, and ClickHouse cannot refuse two events at one (stream,
// seq) atomically, so that writes both were told had succeeded were lost. So the
// node takes the next ownership epoch of the log when it starts (New), as a
// sharded node takes its partitions' when Kafka assigns them, and appends every
// stream under it: the log as the node's writers see it (Node.log) is ownedLog.
// It takes the epoch last, once everything else New builds was built (guardLog,
// takeLog): a node whose New fails (its port, Milvus or an MCP server) takes
// nothing from the node serving the log, and appends nothing before it owns it.
// The next node started on the log takes a higher epoch, and this one's appends
// are refused with eventlog.ErrFenced from then on, never lost: it says so once,
// stops its sessions (the new owner resumed every session left running when it
// started), answers 503 at /healthz, and refuses new tasks and writes until it is
// restarted, which takes the log back (the newest node owns it).

// logPartition is the partition a node that owns the whole log holds: all of
// its streams are appended under its lease.
const logPartition = 0

// ownWait bounds how long New waits for the log to record the node's epoch.
const ownWait = 30 * time.Second

// probeEvery is how often, at most, the health check asks the log whether
// another node took it (logOwner.probe); in between it goes by the last answer.
const probeEvery = time.Second

// ownableLog is what a node needs of a log to own it whole: fencing and claims
// under its lease, and the capabilities its writers find on the log, which
// ownedLog passes on. The ClickHouse log has them all.
type ownableLog interface {
	eventlog.Log
	eventlog.Fencing
	eventlog.Claiming
	eventlog.Health
	eventlog.Analytics
	eventlog.Pruner
	eventlog.Compacting
	eventlog.CompactingCost
	eventlog.PageReader
}

// errLogTaken is the refusal of a write, or of a task, by a node whose event log
// another node took (logOwner).
var errLogTaken = errors.New("this node no longer owns the event log: another node without Kafka started on it since")

// errLogNotOwned is the refusal of a write by a node that has not yet taken its
// log (New has not finished, or failed).
var errLogNotOwned = fmt.Errorf("%w: this node has not taken the event log yet: it takes it once it is built", eventlog.ErrFenced)

// logOwner is a node's lease of the whole log.
type logOwner struct {
	log    ownableLog
	owners eventlog.Releasing // nil: the log does not tell who took it
	node   string
	logger *slog.Logger
	// epoch is the node's, set before owned is closed.
	epoch uint64
	owned chan struct{} // closed once the node took the log
	// onRefused counts each append refused for the lease.
	onRefused func()

	once  sync.Once
	taken chan struct{} // closed once another node took the log
	err   error         // why, set before taken is closed

	probeMu  sync.Mutex
	probed   time.Time
	probeErr error // why the last read of probe failed; nil when it went through
}

// guardLog readies the node to own its log when it has no shared bus,
// Config.ShareLog is not set, and the log's writers race undetected
// (eventlog.SeqRaces): Node.log becomes the log under the node's lease
// (ownedLog), which refuses every write until takeLog took the lease. It is
// called right after openLog, before anything holds the log.
func (n *Node) guardLog() {
	if n.cfg.Bus != nil || n.cfg.ShareLog {
		return
	}
	if r, ok := n.log.(eventlog.SeqRaces); !ok || !r.SeqRacesUndetected() {
		return
	}
	l, ok := n.log.(ownableLog)
	if !ok {
		n.cfg.Logger.Warn("the event log may lose writes of two nodes writing it at once, and cannot fence them: run one node on it, or a cluster on Kafka",
			"log", fmt.Sprintf("%T", n.log))
		return
	}
	o := &logOwner{log: l, node: n.cfg.NodeID, logger: n.cfg.Logger, onRefused: n.metrics.fenced.Inc,
		owned: make(chan struct{}), taken: make(chan struct{})}
	o.owners, _ = n.log.(eventlog.Releasing)
	n.owner, n.log = o, &ownedLog{raw: l, o: o}
}

// takeLog takes the log's next ownership epoch for a node that guardLog readied
// to own it: from then on its writes go under the lease, and the node that
// owned the log before refuses work. New calls it last, once nothing else can
// fail: a node that fails to start takes nothing from the one serving.
func (n *Node) takeLog(ctx context.Context) error {
	o := n.owner
	if o == nil {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, ownWait)
	defer cancel()
	epoch, err := o.log.Own(octx, n.cfg.NodeID, []int{logPartition})
	if err != nil {
		return fmt.Errorf("node: taking ownership of the event log: %w", err)
	}
	o.epoch = epoch
	close(o.owned)
	n.metrics.epoch.Set(float64(epoch))
	n.cfg.Logger.Info("took ownership of the event log: a node started on it later takes it over, and this one then refuses work",
		"node", n.cfg.NodeID, "log", logBackend(o.log), "epoch", epoch)
	return nil
}

// lease is the node's lease of the log.
func (o *logOwner) lease() eventlog.Lease {
	return eventlog.Lease{Partition: logPartition, Epoch: o.epoch}
}

// refusal returns nil while the node owns the log, and why it refuses writes once
// another node took it.
func (o *logOwner) refusal() error {
	if o == nil {
		return nil
	}
	select {
	case <-o.taken:
		return o.err
	default:
	}
	select {
	case <-o.owned:
		return nil
	default:
		return errLogNotOwned
	}
}

// write runs an append under the lease, unless the log was taken already.
func (o *logOwner) write(ctx context.Context, events []messages.Envelope, append func(context.Context, eventlog.Lease, []messages.Envelope) error) error {
	if err := o.refusal(); err != nil {
		if len(events) > 0 {
			o.onRefused()
		}
		return err
	}
	err := append(ctx, o.lease(), events)
	if errors.Is(err, eventlog.ErrFenced) {
		o.onRefused()
		return o.fence(err)
	}
	return err
}

// fence records, once, that another node took the log (cause says how the node
// learned it), says so in the node's log, and returns the refusal every write
// and task gets from then on.
func (o *logOwner) fence(cause error) error {
	o.once.Do(func() {
		by := ""
		if o.owners != nil {
			ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
			rec, err := o.owners.Owners(ctx, []int{logPartition})
			cancel()
			if r, ok := rec[logPartition]; err == nil && ok && r.Epoch > o.epoch {
				by = fmt.Sprintf(" (node %s took it at epoch %d)", r.Node, r.Epoch)
			}
		}
		o.err = fmt.Errorf("%w%s: node %s, which owned it at epoch %d, refuses writes and new tasks: send them to the node that owns the log, or restart this one to take the log back (the other then refuses work in turn): %w",
			errLogTaken, by, o.node, o.epoch, cause)
		o.logger.Error("another node took the event log: this node stops its sessions and refuses writes and new tasks until it is restarted; "+
			"the new owner resumed the sessions left running when it started (two nodes without Kafka cannot share a ClickHouse log: run a cluster on Kafka)",
			"node", o.node, "epoch", o.epoch, "err", o.err)
		close(o.taken)
	})
	return o.err
}

// probe asks the log, at most every probeEvery, whether another node took it,
// so that the health check tells so before the node's next write would: it
// returns the refusal once it is taken. A read that fails (the log is down, or
// does not answer within ctx) returns why: not a refusal, since the node owns
// the log still, but a log that does not answer records no task. In between
// reads it returns the last read's outcome. A nil o (a node that does
// not own its log) has nothing to probe.
func (o *logOwner) probe(ctx context.Context) error {
	if o == nil {
		return nil
	}
	if err := o.refusal(); err != nil || o.owners == nil {
		return err
	}
	o.probeMu.Lock()
	if time.Since(o.probed) < probeEvery {
		err := o.probeErr
		o.probeMu.Unlock()
		return err
	}
	o.probed = time.Now()
	o.probeMu.Unlock()
	rec, err := o.owners.Owners(ctx, []int{logPartition})
	if err != nil {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			err = fmt.Errorf("no answer within the probe's %s: %w", healthTimeout, err)
		}
		err = fmt.Errorf("the event log (%s) did not answer a probe (a read of who owns it): %w", logBackend(o.log), err)
	}
	o.probeMu.Lock()
	o.probeErr = err
	o.probeMu.Unlock()
	if r, ok := rec[logPartition]; err == nil && ok && r.Epoch > o.epoch {
		return o.fence(fmt.Errorf("%w: the log records epoch %d of partition %d", eventlog.ErrFenced, r.Epoch, logPartition))
	}
	return err
}

// stopWhenTaken stops the node's sessions once another node took the log, until
// ctx ends or the node stops: their writes are refused, and the new owner runs
// them. The host owns no session from then on (ReleaseSessions).
func (n *Node) stopWhenTaken(ctx context.Context) {
	select {
	case <-n.owner.taken:
	case <-ctx.Done():
		return
	case <-n.stopping:
		return
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.ReleaseSessions{}, n.cfg.SubmitTimeout).Result()
	if err != nil {
		n.cfg.Logger.Error("stopping the sessions of a node whose event log another node took", "err", err)
		return
	}
	pids, _ := res.([]*actor.PID)
	for _, pid := range pids {
		n.system.Root.Stop(pid)
	}
	n.cfg.Logger.Info("sessions stopped: another node owns the event log", "node", n.cfg.NodeID, "sessions", len(pids))
}

// ownedLog is the log of a node that owns it whole (logOwner): every append and
// claim goes under the node's lease, and once another node took the log, every
// write is refused (errLogTaken, wrapping eventlog.ErrFenced) without reaching
// it. Reads and the log's other capabilities pass through.
type ownedLog struct {
	raw ownableLog
	o   *logOwner
}

// ownedLog passes on the log's capabilities but fencing: the node holds the lease.
var (
	_ eventlog.Log            = (*ownedLog)(nil)
	_ actors.ClaimingStore    = (*ownedLog)(nil)
	_ eventlog.Health         = (*ownedLog)(nil)
	_ eventlog.Analytics      = (*ownedLog)(nil)
	_ eventlog.Pruner         = (*ownedLog)(nil)
	_ eventlog.Compacting     = (*ownedLog)(nil)
	_ eventlog.CompactingCost = (*ownedLog)(nil)
	_ eventlog.PageReader     = (*ownedLog)(nil)
)

// Append appends under the lease.
func (l *ownedLog) Append(ctx context.Context, events []messages.Envelope) error {
	return l.o.write(ctx, events, l.raw.AppendLeased)
}

// Claim claims a session under the lease.
func (l *ownedLog) Claim(ctx context.Context, events []messages.Envelope) error {
	return l.o.write(ctx, events, l.raw.ClaimLeased)
}

func (l *ownedLog) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	return l.raw.Read(ctx, sessionID, fromSeq)
}

// ReadN reads a page of a session (eventlog.PageReader): the node's GET of a
// session's events reads it a page at a time.
func (l *ownedLog) ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	return l.raw.ReadN(ctx, sessionID, fromSeq, n, maxBytes)
}

func (l *ownedLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	return l.raw.Sessions(ctx, f)
}

func (l *ownedLog) Close() error { return l.raw.Close() }

// Writable is the log's: whether its writes go through (an outage, which ends).
// That another node took the log is the health check's to say (Node.Healthy).
func (l *ownedLog) Writable(ctx context.Context) error { return l.raw.Writable(ctx) }

func (l *ownedLog) Report(ctx context.Context, f eventlog.StatsFilter) (*eventlog.Stats, error) {
	return l.raw.Report(ctx, f)
}

// The deletions are writes too: refused once another node took the log.

func (l *ownedLog) PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error) {
	if err := l.o.refusal(); err != nil {
		return 0, err
	}
	return l.raw.PruneBusStreams(ctx, beforeUS, limit)
}

func (l *ownedLog) PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error) {
	if err := l.o.refusal(); err != nil {
		return 0, err
	}
	return l.raw.PruneStreams(ctx, prefix, beforeUS, limit)
}

func (l *ownedLog) PruneListed(ctx context.Context, streams []eventlog.StreamBound) (int, error) {
	if err := l.o.refusal(); err != nil {
		return 0, err
	}
	return l.raw.PruneListed(ctx, streams)
}

func (l *ownedLog) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	if err := l.o.refusal(); err != nil {
		return 0, err
	}
	return l.raw.DeleteEvents(ctx, stream, seqs)
}

func (l *ownedLog) CompactMin() int { return l.raw.CompactMin() }

// ownedSnapshots are the fold snapshots of an owned log (eventlog.Snapshots):
// a save is a write too, refused once another node took the log. (A stale
// save that lands is harmless: a session actor checks a snapshot against the
// log's event at its seq.)
type ownedSnapshots struct {
	eventlog.Snapshots
	o *logOwner
}

func (s ownedSnapshots) SaveSnapshot(ctx context.Context, snap eventlog.FoldSnapshot) error {
	if err := s.o.refusal(); err != nil {
		return err
	}
	return s.Snapshots.SaveSnapshot(ctx, snap)
}

// snapshots returns the fold snapshots the node's sessions keep in its log
// (SessionDeps.Snapshots): the log's own, past the node's wrappers (ownedLog,
// of a ClickHouse log a node owns without Kafka); nil when it keeps none.
func (n *Node) snapshots() eventlog.Snapshots {
	if l, ok := n.log.(*ownedLog); ok {
		if s, ok := l.raw.(eventlog.Snapshots); ok {
			return ownedSnapshots{s, l.o}
		}
		return nil
	}
	s, _ := n.log.(eventlog.Snapshots)
	return s
}
