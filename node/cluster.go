package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Role is what a node does in a cluster. Nodes run the same binary; roles let tool
// execution (or model calls) scale apart from the agents.
type Role uint8

// The roles. The zero Role means all of them.
const (
	// RoleSessions consumes troupe.tasks and runs the session actors of the
	// partitions the node is assigned.
	RoleSessions Role = 1 << iota
	// RoleTools serves tool calls: those of its own sessions, and requests on
	// troupe.tool.requests from nodes without the role.
	RoleTools
	// RoleModels serves model calls the same way, on troupe.model.requests.
	RoleModels

	RoleAll = RoleSessions | RoleTools | RoleModels

	// RoleClient runs nothing: the node submits tasks to the cluster and follows their
	// events (`node run --kafka`), without joining any consumer group, so it moves no
	// sessions when it comes and goes.
	RoleClient Role = 1 << 7
)

var roleNames = []struct {
	r    Role
	name string
}{{RoleSessions, "sessions"}, {RoleTools, "tools"}, {RoleModels, "models"}}

// ParseRoles reads a comma-separated list of roles ("sessions,tools"), or "all".
func ParseRoles(s string) (Role, error) {
	var r Role
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "all" {
			r |= RoleAll
			continue
		}
		found := false
		for _, rn := range roleNames {
			if rn.name == part {
				r |= rn.r
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("node: unknown role %q (roles: sessions, tools, models, all)", part)
		}
	}
	return r, nil
}

// Has reports whether r includes role; the zero Role includes every role.
func (r Role) Has(role Role) bool { return r == 0 || r&role == role }

func (r Role) String() string {
	if r == 0 {
		r = RoleAll
	}
	if r == RoleClient {
		return "client"
	}
	var names []string
	for _, rn := range roleNames {
		if r&rn.r != 0 {
			names = append(names, rn.name)
		}
	}
	return strings.Join(names, ",")
}

// defaultNodeID names a node by host and process, which is unique among live nodes.
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// ownership is the partition set of troupe.tasks a sharded node owns.
type ownership struct {
	mu         sync.Mutex
	generation int64
	partitions map[int]bool
	total      int // the topic's partitions at the last assignment
	// lease is the node's claim on the partitions in a log that fences (fencing.go),
	// from the log's recording it until the partitions' session actors stopped.
	lease lease
	// released are the partitions of the generation whose previous owner released
	// them cleanly (eventlog.Releasing), read from the owner records the lease's
	// epoch superseded (Releasing.TakeOver, takeOver): their ended sessions are on
	// the bus already, and resumeOwned publishes none of them again. Nil without a lease, or with a log that does not record releases.
	released map[int]bool
	// publishedBefore are, for the other partitions of the generation, the time
	// before which their previous owner published every event it appended (its
	// publication mark less markMargin, pubmark.go): resumeOwned publishes again
	// none of their sessions whose events are all older. Read with released.
	publishedBefore map[int]int64
	// resumed is the latest generation whose resumption finished (resumeOwned):
	// every session it had to resume or publish again was handed to the host.
	// A generation revoked before that is not released cleanly (handOver).
	resumed int64
	// handedOver is the epoch of the last lease handOver ran for: it runs once per
	// lease, from Revoked or from Close.
	handedOver uint64
	// revoked is closed when the generation is revoked; taking counts the
	// goroutines still taking a lease in the background.
	revoked chan struct{}
	taking  sync.WaitGroup
	// held is partitions and total for readers that must not wait for mu (the hub,
	// runsHere); nil when the node owns none.
	held atomic.Pointer[heldPartitions]
	// fenced are the partitions of a generation whose lease another node took
	// meanwhile (an append under it was fenced): the host starts none of their
	// sessions again until the next assignment (fencedOut). Read without mu, by
	// the host's owns.
	fenced atomic.Pointer[fencedPartitions]
}

// fencedPartitions are the partitions of generation gen this node was fenced on,
// since the first of them was (strandedAfter).
type fencedPartitions struct {
	gen   int64
	parts map[int]bool
	since time.Time
}

// heldPartitions is a sharded node's assignment, as ownership.held publishes it.
type heldPartitions struct {
	set   map[int]bool
	total int
	gen   int64 // the generation that assigned them
}

// runsHere reports whether this node runs a session now: it is a sharded node with
// the sessions role that owns the session's partition. The hub feeds the watchers
// of such a session from its session actor; others read messages.TopicEvents.
func (n *Node) runsHere(sessionID string) bool {
	if !n.sharded() || !n.cfg.Roles.Has(RoleSessions) {
		return false
	}
	h := n.own.held.Load()
	return h != nil && h.total > 0 && h.set[n.cfg.Bus.Partition(sessionID, h.total)]
}

// Assigned tells a sharded node (Bus.Sharded) that it owns the given partitions of
// troupe.tasks, out of total, until the next Revoked: it runs their sessions and
// resumes those left unfinished by their previous owner (a node that crashed or
// left), by folding their events from the shared log. Kafka's consumer group calls it
// through the kafka package's RebalanceListener before it delivers any task of the
// new generation.
func (n *Node) Assigned(partitions []int, total int) {
	if !n.sharded() || total <= 0 {
		return
	}
	set := make(map[int]bool, len(partitions))
	for _, p := range partitions {
		set[p] = true
	}
	n.own.mu.Lock()
	n.own.generation++
	gen := n.own.generation
	n.own.partitions, n.own.total, n.own.released, n.own.publishedBefore = set, total, nil, nil
	n.own.held.Store(&heldPartitions{set: set, total: total, gen: gen})
	n.takenOver(partitions, total) // deltas_cluster.go: the watchers elsewhere announce themselves again
	revoked := make(chan struct{})
	n.own.revoked = revoked
	n.own.mu.Unlock()
	n.metrics.partitions.Set(float64(len(partitions)))
	n.metrics.total.Set(float64(total))
	n.metrics.assigned.Inc()
	n.cfg.Logger.Info("partitions assigned", "node", n.cfg.NodeID, "partitions", partitions, "of", total)
	if len(partitions) > 0 && n.leased != nil {
		// Fence the partitions' previous owners before running any of their
		// sessions: they may be alive still, evicted while they hung (fencing.go).
		if !n.takeLeases(gen, partitions, time.Now().Add(leaseWait), revoked) {
			n.own.taking.Go(func() {
				if n.takeLeases(gen, partitions, time.Time{}, revoked) {
					n.runAssigned(gen, set, total)
				}
			})
			return
		}
	}
	n.runAssigned(gen, set, total)
}

// runAssigned lets the host run the sessions of the partitions of generation gen,
// and resumes those left unfinished, unless the generation ended meanwhile.
func (n *Node) runAssigned(gen int64, set map[int]bool, total int) {
	partition := n.cfg.Bus.Partition
	owns := func(id string) bool {
		p := partition(id, total)
		if !set[p] {
			return false
		}
		// A partition this generation was fenced on is another node's now: a session
		// of it started again here would fold the new owner's events and perform
		// the effects it has in flight, before its first append is fenced.
		f := n.own.fenced.Load()
		return f == nil || f.gen != gen || !f.parts[p]
	}
	// Holding the lock orders this SetOwnership before the ReleaseSessions of the
	// generation's Revoked, which changes the generation first.
	n.own.mu.Lock()
	current := n.own.generation == gen
	released, marks := n.own.released, n.own.publishedBefore
	cleanly := func(id string) bool { return released[partition(id, total)] }
	before := func(id string) int64 { return marks[partition(id, total)] }
	if current {
		if _, err := n.system.Root.RequestFuture(n.host, &actors.SetOwnership{Owns: owns, Republish: true, HandedOver: cleanly,
			PublishedBefore: before}, n.cfg.SubmitTimeout).Result(); err != nil {
			n.cfg.Logger.Error("set session ownership", "err", err)
		}
	}
	n.own.mu.Unlock()
	if !current || len(set) == 0 {
		return
	}
	// Resuming reads the log; it runs beside the tasks of the new generation (both
	// reach a session through the host, which runs each session once).
	go func() {
		if err := n.resumeOwned(context.Background(), gen, owns, cleanly, before); err != nil {
			n.cfg.Logger.Error("resume sessions of assigned partitions", "err", err)
		}
	}()
}

// Revoked tells a sharded node that it owns no partition any more. It hands its
// sessions over: each stops issuing effects, gets up to Config.HandoffGrace for those
// in flight to answer (their results are recorded, so the next owner does not perform
// them again), and is stopped: a session still busy then, retrying a write to a log
// that is down, gives the write up (it is answered ErrNotOwner, as are the requests
// queued behind it, and their next owner reads them again), so that a failing log
// does not hold the handover. Revoked returns once every session actor stopped, so
// that nothing this node does overlaps with the partitions' next owners; events are
// durable before effects are issued, so those owners fold the sessions exactly where
// they stopped.
//
// Once they stopped, and if the generation's resumption had finished, Revoked waits
// (up to Config.HandoffGrace) until the outbox published everything the sessions
// handed it, and then records in the log that this node released its partitions
// cleanly (eventlog.Releasing, handOver): their next owners, which read it as they
// take the partitions over, publish nothing of their ended sessions again. A broker
// that does not take the events in time leaves the partitions unmarked, and their
// next owners publish the latest task of each session that ended lately again.
//
// All of it is bounded by revokeBudget: the group evicts a member that has not
// rejoined within its RebalanceTimeout, heartbeats or not (the kafka package
// heartbeats for the member while Revoked runs, so its SessionTimeout does not),
// and gives its partitions to the others while it still hands them over. What is
// still waited for at the deadline is abandoned and logged: a lease being taken in
// the background, sessions not drained or not stopped (their next owners issue their
// effects again; the log's fencing stops a session's late write), or the release
// (the next owners publish the lately ended sessions again).
func (n *Node) Revoked() {
	if !n.sharded() {
		return
	}
	deadline := time.Now().Add(n.revokeWithin)
	var abandoned []string
	defer func() {
		if len(abandoned) > 0 {
			n.cfg.Logger.Warn("partitions revoked at the end of the handover's budget, abandoning what was still waited for",
				"node", n.cfg.NodeID, "budget", n.revokeWithin, "abandoned", abandoned)
		}
	}()
	n.own.mu.Lock()
	n.own.generation++
	n.own.partitions = nil
	n.own.held.Store(nil)
	if n.own.revoked != nil {
		close(n.own.revoked)
		n.own.revoked = nil
	}
	n.own.mu.Unlock()
	// Watchers of the sessions this node ran watch again, on the bus.
	n.hub.revoked()
	// An Own still running in the background lands before the partitions' next
	// owners take them (they cannot before Revoked returns), not after.
	if !waitBy(deadline, n.own.taking.Wait) {
		abandoned = append(abandoned, "a lease still being taken (recorded late, it would fence the partitions' next owner)")
	}
	n.metrics.partitions.Set(0)
	n.own.mu.Lock()
	held := n.own.lease
	n.own.mu.Unlock()
	defer n.dropLease(held) // once every session actor stopped: draining sessions append under it
	if n.hostStopped.Load() || n.closing() {
		// The node closes: Close drains its sessions and hands the lease over
		// (here, a drain would wait for its turn behind Close's, then ask a
		// host that Close stopped meanwhile, and give up at the deadline); this
		// member leaves the group once Revoked returned.
		if !waitBy(deadline, func() {
			t := time.NewTimer(n.cfg.HandoffGrace + leaseWait)
			defer t.Stop()
			select {
			case <-n.handedOver:
			case <-t.C:
			}
		}) {
			abandoned = append(abandoned, "the handover of the closing node")
		}
		return
	}
	start := time.Now()
	d, err := n.drainSessions(deadline)
	if err != nil {
		n.cfg.Logger.Error("release sessions", "err", err)
		return
	}
	if d.stopping > 0 {
		abandoned = append(abandoned, fmt.Sprintf("%d of %d session actors still stopping", d.stopping, d.sessions))
	}
	// Their tasks run on the partitions' next owners now (troupe_tasks_running).
	n.metrics.sessions.handedOver()
	n.cfg.Logger.Info("partitions revoked; sessions handed over", "node", n.cfg.NodeID, "sessions", d.sessions,
		"effects_abandoned_sessions", d.late, "took", time.Since(start).Round(time.Millisecond))
	if !n.handOver(held, deadline) {
		abandoned = append(abandoned, "the clean release")
	}
}

// drained is what drainSessions did: the session actors it handed over, how many
// of them still waited on an effect at the end of their grace (their next owner
// issues it again, with its key), and how many had not stopped by the deadline.
type drained struct {
	sessions       int
	late, stopping int64
}

// drainSessions takes every session actor from the host (actors.ReleaseSessions:
// it runs none from now on) and drains each (actors.Drain): it issues no more
// effects and gets up to Config.HandoffGrace, and until deadline, for those in
// flight to answer, recording their results, so that whoever runs the session next
// (the partition's next owner, or this node started again) does not perform them
// again. Then it is stopped, and waited for until deadline. Revoked and Close hand
// sessions over this way, one at a time (drainTurn): one that comes while the
// other drains waits for it, rather than stop its sessions under it or go on
// (a release recorded, a lease dropped) while they still append.
func (n *Node) drainSessions(deadline time.Time) (drained, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case n.drainTurn <- struct{}{}:
		defer func() { <-n.drainTurn }()
	case <-t.C:
		return drained{}, errors.New("another handover of the sessions still drains them")
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.ReleaseSessions{}, within(deadline, n.cfg.SubmitTimeout)).Result()
	if err != nil {
		return drained{}, err
	}
	// The sessions of the lease held now are handed over once this returns: a
	// call of theirs still queued in its performer's queue (session actors leave
	// theirs behind as they stop) must not start then, under a lease kept only
	// for its release (ownsCall).
	n.own.mu.Lock()
	held := n.own.lease.epoch
	n.own.mu.Unlock()
	defer func() {
		n.own.mu.Lock()
		if n.own.lease.epoch == held {
			n.own.lease.drained = true
		}
		n.own.mu.Unlock()
	}()
	pids, _ := res.([]*actor.PID)
	stopCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	var late, stopped atomic.Int64
	for _, pid := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.system.Root.RequestFuture(pid, &actors.Drain{}, within(deadline, n.cfg.HandoffGrace)).Result(); err != nil {
				late.Add(1) // still waiting on an effect: its next owner issues it again
			}
			// Not StopFuture: its future gives up after protoactor's fixed 10 s,
			// and the handover went on under a session still handling a message
			// (an append attempt to a slow log, which IOTimeout bounds).
			if actors.AwaitStop(stopCtx, n.system, pid, n.system.Root.Stop) == nil {
				stopped.Add(1)
			}
		}()
	}
	d := drained{sessions: len(pids)}
	if !waitBy(deadline, wg.Wait) {
		d.stopping = int64(len(pids)) - stopped.Load()
	}
	d.late = late.Load()
	return d, nil
}

// revokeBudget bounds Node.Revoked as a whole: below the 30 s RebalanceTimeout of
// a node's consumer groups (kafka.DialNode), less the heartbeat interval after
// which the group's heartbeat learned of the rebalance (1 s), the time its
// partition consumers take to stop and commit, and the JoinGroup's trip.
const revokeBudget = 20 * time.Second

// within is d, or less to end by deadline (at least a millisecond: a timeout of
// zero would wait for ever).
func within(deadline time.Time, d time.Duration) time.Duration {
	return max(min(d, time.Until(deadline)), time.Millisecond)
}

// waitBy runs wait and reports whether it returned by deadline; one that did not
// goes on in the background.
func waitBy(deadline time.Time, wait func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// republishWindow is how far back resumeOwned looks for sessions that ended lately:
// a previous owner killed (or fenced) after appending a session's last events, but
// before publishing them, did so within the group's session timeout of the
// assignment, and a fenced owner before it woke.
const republishWindow = 10 * time.Minute

// resumeOwned wakes every unfinished session this node owns, and every one that ended
// within republishWindow past what this process published of it (published.go),
// except those of the partitions their previous owner released cleanly (cleanly:
// it published all it appended, see handOver) and those that ended before the
// previous owner's publication mark (before, pubmark.go), unless ownership changed meanwhile
// (the host would ignore them anyway). Once every one was resumed in generation
// gen, the generation may be released cleanly when it ends. Each folds
// its events and publishes its latest task's again (actors.SetOwnership.Republish):
// what a previous owner appended and never published reaches troupe.events and
// troupe.results; the unfinished ones go on. Before it resumes the ended ones, it
// looks for the last event and result of each on the bus (findOnBus, onbus.go):
// those found publish nothing again.
// The sessions are resumed Config.ResumeConcurrency at a time (resumeSessions):
// each reads its log, and a takeover of many must leave connections to the rest
// of the node. The listings get a minute.
func (n *Node) resumeOwned(ctx context.Context, gen int64, owns, cleanly func(string) bool, before func(string) int64) error {
	if n.afterTask != nil {
		// The turns of the partitions' sessions that their previous owner (or this
		// node, before a restart) did not remember are remembered here
		// (memoryagent.go).
		n.afterTask.recover(owns)
	}
	current := func() bool {
		n.own.mu.Lock()
		defer n.own.mu.Unlock()
		return n.own.generation == gen
	}
	var infos, ended []eventlog.SessionInfo
	err := n.untilRead(ctx, "list the sessions of assigned partitions to resume", current, func(lctx context.Context) (err error) {
		if infos, err = n.log.Sessions(lctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true}); err != nil {
			return err
		}
		ended, err = n.log.Sessions(lctx, eventlog.Filter{UpdatedSinceUS: n.cfg.Clock.Now().Add(-republishWindow).UnixMicro(), SessionsOnly: true}) // the clock that stamps the events
		return err
	})
	if err != nil {
		return err
	}
	running := len(infos)
	for _, s := range ended {
		// An ended session whose events this process published to its last
		// needs nothing published again (published.go), nor does one of a
		// partition its previous owner released cleanly (handOver), nor one
		// that ended before its previous owner's publication mark (pubmark.go).
		if s.Status != messages.StatusRunning && !n.published.covers(s.ID, s.LastSeq) && !cleanly(s.ID) && s.UpdatedUS >= before(s.ID) {
			infos = append(infos, s)
		}
	}
	var unfinished, endedIDs []string
	var toRepublish, resumed []eventlog.SessionInfo
	for i, s := range infos {
		if owns(s.ID) && eventlog.IsSession(s.ID) { // a notes stream is no session
			if i < running {
				unfinished = append(unfinished, s.ID)
				resumed = append(resumed, s)
			} else {
				endedIDs = append(endedIDs, s.ID)
				toRepublish = append(toRepublish, s)
			}
		}
	}
	complete := true
	if len(unfinished)+len(endedIDs) > 0 && current() {
		// Those of the ended ones whose last event and result the bus holds
		// already publish nothing again (onbus.go); they are resumed all the
		// same, and publish again if the task has a reply topic. The unfinished
		// ones go on while the bus is read.
		scan := make(chan map[string]bool, 1)
		go func() { scan <- n.findOnBus(ctx, toRepublish) }()
		complete = n.resumeSessions(ctx, unfinished, current)
		if n.parentEnds != nil && current() {
			// Children whose parents' tasks failed on a node that stopped before it
			// cancelled them are cancelled.
			n.parentEnds.resumed(resumed)
		}
		found := <-scan
		republished := len(toRepublish) - len(found)
		n.cfg.Logger.Info("resuming the unfinished and lately ended sessions of assigned partitions", "count", len(unfinished)+len(endedIDs),
			"ended_republished", republished, "ended_found_on_bus", len(found))
		n.metrics.republished.Add(float64(republished))
		n.metrics.foundOnBus.Add(float64(len(found)))
		complete = n.resumeSessions(ctx, endedIDs, current) && complete
	}
	// The failed parents of the partitions' recent sub-agents wait for their
	// children's ends here (lateanswers.go): the previous owner's answers are
	// refused now. Those woken above already do. Their listing is retried
	// through a log blip (untilRead), as the one above: before, a failed one was
	// logged, and the ends were never recorded on their parents.
	woken := make(map[string]bool, len(unfinished)+len(endedIDs))
	for _, id := range append(unfinished, endedIDs...) {
		woken[id] = true
	}
	var parents []string
	if err := n.untilRead(ctx, "list the failed parents of recent sub-agents", current, func(lctx context.Context) (err error) {
		parents, err = n.lateParents(lctx, func(id string) bool { return owns(id) && !woken[id] })
		return err
	}); err != nil {
		n.cfg.Logger.Warn("delegate: list the failed parents of recent sub-agents; the sub-agents' ends not recorded on them yet are not", "err", err)
	} else if len(parents) > 0 && current() {
		n.resumeSessions(ctx, parents, current) // publishes nothing: it may fail and the generation still be resumed
	}
	n.own.mu.Lock()
	complete = complete && n.own.generation == gen
	if complete {
		n.own.resumed = gen
	}
	n.own.mu.Unlock()
	if complete {
		n.metrics.resumptions.Inc()
	}
	return nil
}

// untilRead runs read, a read of the log whose failure would leave work undone
// (the sessions to resume after an assignment, or a start), each attempt bounded
// by a minute and by ctx, and cut short when the node stops, and retries a
// failure with backoff (capped at 5 s) while eventlog.ReadRetry says a retry may
// mend it (an outage, for as long as it lasts; an error of unknown kind, for
// eventlog.UnknownFailureBound), current holds, ctx lasts and the node runs:
// before, a ClickHouse blip as a node was assigned partitions left their
// unfinished sessions unresumed, their tasks waiting for a message that might
// never come. A permanent error (a corrupt row, a ClickHouse schema or auth
// error, a closed log) is returned at once; otherwise the last error when
// current stopped holding, ctx ended or the node stopped before a read succeeded.
func (n *Node) untilRead(ctx context.Context, what string, current func() bool, read func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the node stopping ends the attempt under way and the waits
		select {
		case <-n.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	attempts, err := eventlog.RetryRead(ctx, 100*time.Millisecond, current, func(int) error {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return read(actx)
	}, func(attempt int, wait time.Duration, err error) {
		n.cfg.Logger.Warn("event log read failed; retrying", "node", n.cfg.NodeID, "read", what, "attempt", attempt, "retry_in", wait, "err", err)
	})
	if err == nil && attempts > 1 {
		n.cfg.Logger.Info("event log read succeeded after retries", "node", n.cfg.NodeID, "read", what, "attempts", attempts)
	}
	return err
}

func (n *Node) sharded() bool { return n.cfg.Bus != nil && n.cfg.Bus.Sharded }

// handleEffect serves an effect request from a node without the tools or models role:
// it performs the effect here (Node.local, shared with this node's own sessions) and
// publishes the reply. The request is acked only after the reply is published, so a
// node that dies mid-call leaves the request to another node, which performs it with
// the same idempotency key. A node that stops takes no request on any more (it leaves
// them unacked, for the next node to read them), and lets those it took on answer
// within Config.HandoffGrace, publishing their replies, before it stops the handler
// (Close, stopAdmitting): stopped first, it left their requests unacked while the
// calls ran on, and the next node to read them performed them again. A call that
// outlives the grace is cancelled and left unacked, to be performed there again.
// A call queued behind its tool's (or the model's) concurrency bound when the
// node begins to give the request's partition up (servedHandoff) never starts
// here: it is left unacked, for the next owner to perform it once, while the
// calls that started are answered before the partition goes (holdServedCalls).
func (n *Node) handleEffect(msg *message.Message) error {
	if !n.served.start() {
		// The node stops: the request waits, unacked, until the handler stops.
		t := time.NewTimer(n.cfg.HandoffGrace)
		defer t.Stop()
		select {
		case <-msg.Context().Done():
		case <-t.C:
		}
		return fmt.Errorf("effect request %s: %w", msg.UUID, errStopping)
	}
	defer n.served.done()
	req, err := messages.DecodeEffectRequest(msg.Payload)
	if err != nil {
		return fmt.Errorf("%w: effect request %s: %w", errPermanent, idHead(msg.UUID), err)
	}
	if req, err = n.fullRequest(msg.Context(), req); err != nil {
		return err // a log that does not answer: retried
	}
	if !n.local.Known(req.Key) {
		// Not performed here lately: a request delivered again (its first performer
		// died before committing it) may still be answered in the session's log. The
		// session has the result, and performing it again would repeat a recorded
		// effect. (An answer this node keeps is sent again without reading the log.)
		if done, err := n.answered(msg.Context(), req); err != nil {
			return err // retried
		} else if done {
			return nil
		}
	}
	if n.tracing.on() {
		defer n.tracing.expectRemote(msg, req.Key)()
	}
	replied := make(chan messages.EffectReply, 1)
	withdrawn := make(chan struct{})
	n.local.PerformWhile(n.servedHandoff(msg, req), req, func(rep messages.EffectReply) { replied <- rep }, func() { close(withdrawn) })
	var rep messages.EffectReply
	select {
	case rep = <-replied:
	case <-withdrawn:
		// Its partition is being given up before the call left the queue: the
		// next owner performs it, once.
		return fmt.Errorf("effect %s: %w", req.Key, errHandedOver)
	case <-n.stopping:
		// The call gets the grace to answer (stopAdmitting waits as long for it).
		t := time.NewTimer(n.cfg.HandoffGrace)
		defer t.Stop()
		select {
		case rep = <-replied:
		case <-t.C:
			return fmt.Errorf("effect %s: %w", req.Key, errStopping)
		case <-msg.Context().Done():
			return fmt.Errorf("effect %s: %w", req.Key, msg.Context().Err())
		}
	case <-msg.Context().Done():
		return fmt.Errorf("effect %s: %w", req.Key, msg.Context().Err())
	}
	b, err := messages.EncodeCommand(&rep)
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	if len(b) > effectMessageMax {
		stream, err := n.storeEffect(msg.Context(), messages.BusStoredReply, req.Key, b)
		if err != nil {
			return err // retried; the answer is kept (LocalEffects), not performed again
		}
		if b, err = replyRef(req, stream); err != nil {
			return fmt.Errorf("%w: %w", errPermanent, err)
		}
	}
	out := message.NewMessage(watermill.NewUUID(), b)
	out.Metadata.Set(messages.MetaSessionID, req.SessionID)
	out.Metadata.Set(messages.MetaReplyNode, req.ReplyNode)
	out.Metadata.Set(messages.MetaCorrelationID, msg.UUID)
	if err := n.pub.Publish(req.ReplyTopic, out); err != nil {
		return fmt.Errorf("publish effect reply for %s: %w", req.Key, err)
	}
	return nil
}

// errStopping ends the handling of a bus message because the node stops: it is not
// retried here, and not acked, so the message is delivered again (to the next owner
// of its partition).
var errStopping = errors.New("the node is stopping")

// errHandedOver ends the handling of an effect request whose partition this node
// began to give up before the call started (servedHandoff): it is not retried
// here, and not acked, so the partition's next owner performs the call.
var errHandedOver = errors.New("its partition is being handed over before its call started")

// answered reports whether the session's log records the result of the request's
// effect. Its key names the seq of the request event; the result follows it.
func (n *Node) answered(ctx context.Context, req messages.EffectRequest) (bool, error) {
	events, err := n.log.Read(ctx, req.SessionID, req.Key.Seq+1)
	if err != nil {
		return false, fmt.Errorf("read session %s: %w", req.SessionID, err)
	}
	want := messages.TypeToolCallCompleted
	if req.Model != nil {
		want = messages.TypeModelResponded
	}
	for _, e := range events {
		if e.Type != want || e.CausationID != req.Key.String() {
			continue
		}
		return true, nil
	}
	return false, nil
}

// handleReply hands a reply addressed to this node to its BusEffects.
func (n *Node) handleReply(msg *message.Message) error {
	if msg.Metadata.Get(messages.MetaReplyNode) != n.cfg.NodeID {
		return nil
	}
	if msg.Metadata.Get(messages.MetaType) == messages.TypeMemoryReply {
		n.deliverMemoryReply(msg)
		return nil
	}
	if n.remote == nil {
		return nil // no effects asked of other nodes
	}
	rep, err := messages.DecodeEffectReply(msg.Payload)
	if err != nil {
		n.cfg.Logger.Warn("dropping a malformed effect reply", "message", idHead(msg.UUID), "err", err)
		return nil // the session issues the effect again once it is recovered
	}
	if rep.Stored != "" && !n.remote.Waiting(rep.Key) {
		return nil // nobody waits for it here: not worth reading
	}
	if rep, err = n.fullReply(msg.Context(), rep); err != nil {
		return err // retried
	}
	n.remote.Deliver(rep)
	return nil
}

// handleEffectCancel cancels an effect this node performs for another node's session
// (or, when its request has not arrived yet, answers that request cancelled). Every
// node serving effects reads every cancellation; those for calls elsewhere cost a
// lookup.
func (n *Node) handleEffectCancel(msg *message.Message) error {
	c, err := messages.DecodeEffectCancel(msg.Payload)
	if err != nil {
		n.cfg.Logger.Warn("dropping a malformed effect cancellation", "message", idHead(msg.UUID), "err", err)
		return nil // the call runs to its end or its timeout
	}
	n.local.Cancel(c.Key)
	return nil
}

// publishCancel sends a cancellation to the session's owner over troupe.tasks: a
// session whose log records no running task is answered ErrNoRunningTask, and
// nothing is sent. The cancellation names the task running now, so that read
// again (Kafka delivers at least once) it cancels that task only.
func (n *Node) publishCancel(ctx context.Context, c messages.CancelRequest) error {
	status, ok, err := n.Status(ctx, c.SessionID)
	if err != nil {
		return err
	}
	if !ok || status.Status != messages.StatusRunning {
		return actors.ErrNoRunningTask
	}
	if c.TaskID == "" {
		c.TaskID = status.TaskID
	}
	return n.sendCancel(ctx, c)
}

// sendCancel publishes a cancellation on troupe.tasks, keyed by its session: on
// the session's partition, after every message published there before it, so its
// owner handles it after any task published before it (sessionOrder), or finds no
// running task and drops it (handleCancel).
func (n *Node) sendCancel(ctx context.Context, c messages.CancelRequest) error {
	b, err := messages.EncodeCommand(&c)
	if err != nil {
		return err
	}
	msg := message.NewMessage(n.cfg.IDs.NewID(), b)
	msg.Metadata.Set(messages.MetaSessionID, c.SessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeCancelRequested)
	msg.SetContext(ctx)
	if err := n.pub.Publish(messages.TopicTasks, msg); err != nil {
		return fmt.Errorf("node: publish cancellation: %w", err)
	}
	return nil
}

// handleCancel runs a CancelRequest read from troupe.tasks on the session's owner.
func (n *Node) handleCancel(msg *message.Message) error {
	c, err := n.ingress.DecodeCancel(arrivalOf(msg))
	if err != nil {
		return fmt.Errorf("%w: cancel message %s: %w", errPermanent, idHead(msg.UUID), err)
	}
	if forwarded, err := n.forward(msg, nil, c.SessionID, commandOf(&c)); forwarded || err != nil {
		return err
	}
	err = n.cancelHere(c)
	switch {
	case errors.Is(err, actors.ErrNoRunningTask):
		return nil // finished meanwhile: nothing to cancel
	case err != nil:
		return fmt.Errorf("cancel session %s: %w", c.SessionID, err) // retried
	}
	return nil
}

// PartitionsOwned returns how many partitions of troupe.tasks a sharded node owns now.
func (n *Node) PartitionsOwned() int {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	return len(n.own.partitions)
}

// forward publishes a message read from troupe.tasks on a partition other than its
// session's to the session's partition, and reports whether it did; the caller then
// acks the misplaced copy (so its offset is committed only after the forward was
// acknowledged by the broker) or, if the forward failed, returns the error to be
// retried. Producers other than Troupe's place keys by their own partitioner
// (librdkafka clients, kcat among them, by CRC32 of the key) or write no key at all;
// Troupe's sessions live on their murmur2 partition (Bus.Partition), whose owner
// alone runs them.
//
// The copy keeps the message's ID, payload and metadata, with the session as its key,
// so the owner reads exactly what this node read (a task's session named after its
// message, for one without a key or session_id, too), and a copy forwarded twice (this
// node crashed between forwarding and committing, and the message was read again)
// is skipped by ID on the owner, and by the session's log.
//
// A copy over effectMessageMax (a record as large as its producer may send: the
// session's key and headers made it larger than the bus takes, and its forward
// failed for ever) carries instead, when compact is set, the payload and metadata
// compact returns: what the node read, in fewer bytes (a task's envelope, stored in
// the log as a task too large for the bus is; a cancellation or an answer encoded
// anew, without the spaces a producer may have padded it with). A payload other than
// nil goes in the copy in place of the message's (a task's envelope).
func (n *Node) forward(msg *message.Message, payload []byte, sessionID string, compact func() (*message.Message, error)) (bool, error) {
	if !n.sharded() {
		return false, nil
	}
	reader, ok := n.tasksSub.(PartitionReader)
	if !ok {
		return false, nil
	}
	from, ok := reader.MessagePartition(msg)
	if !ok {
		return false, nil
	}
	n.own.mu.Lock()
	total := n.own.total
	n.own.mu.Unlock()
	if total <= 0 {
		return false, nil // never assigned: the session host refuses the message
	}
	to := n.cfg.Bus.Partition(sessionID, total)
	if to == from {
		return false, nil
	}
	if payload == nil {
		payload = msg.Payload
	}
	out := message.NewMessage(msg.UUID, payload)
	for k, v := range msg.Metadata {
		out.Metadata.Set(k, v)
	}
	out.Metadata.Set(messages.MetaSessionID, sessionID)
	if compact != nil && messageSize(out) > effectMessageMax {
		small, err := compact()
		if err != nil {
			return true, fmt.Errorf("forward message %s of session %s: %w", msg.UUID, sessionID, err) // retried
		}
		out.Payload = small.Payload
		for k, v := range small.Metadata {
			out.Metadata.Set(k, v)
		}
	}
	out.SetContext(msg.Context())
	publish := n.pub.Publish
	if pp, ok := n.pub.(PartitionPublisher); ok {
		// To the partition computed here, with the count of the assignment: the
		// publisher's count may be another for a while (PartitionPublisher).
		publish = func(topic string, msgs ...*message.Message) error { return pp.PublishToPartition(topic, to, msgs...) }
	}
	if err := publish(messages.TopicTasks, out); err != nil {
		return true, fmt.Errorf("forward message %s of session %s from partition %d of %s to partition %d: %w",
			idHead(msg.UUID), sessionID, from, messages.TopicTasks, to, err) // retried, then delivered again
	}
	markForwarded(msg)
	n.metrics.forwarded.Inc()
	n.cfg.Logger.Debug("forwarded a message to its session's partition", "message", idHead(msg.UUID), "session", sessionID,
		"from", from, "to", to)
	return true, nil
}

// messageSize is the size of msg on the bus, as the Kafka publisher counts it
// against its limit: its payload, and its metadata as headers (the message ID's
// among them).
func messageSize(msg *message.Message) int {
	size := len(msg.UUID) + len(msg.Payload)
	for k, v := range msg.Metadata {
		size += len(k) + len(v)
	}
	return size
}

// commandOf is forward's compact form of a command read from troupe.tasks: c,
// encoded anew.
func commandOf(c messages.Command) func() (*message.Message, error) {
	return func() (*message.Message, error) {
		b, err := messages.EncodeCommand(c)
		if err != nil {
			return nil, err
		}
		return message.NewMessage("", b), nil
	}
}

// closing reports whether Close has begun.
func (n *Node) closing() bool {
	select {
	case <-n.stopping:
		return true
	default:
		return false
	}
}
