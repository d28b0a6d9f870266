package consolidator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/memory"
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Open returns the namespace a run consolidates (required): in a node,
	// memory.Memories.Namespace, or Memories.Hold with a target that is a Releaser.
	// It is called at the start of every run.
	Open func(ctx context.Context, namespace string) (Target, error)
	// Consolidator is the configuration of every run (model, policy, logger); its
	// Now defaults to Clock.Now.
	Consolidator Config
	// Interval is how long after its last run (or its start) a namespace's
	// consolidator runs again (default 10m; negative: never on a schedule).
	Interval time.Duration
	// Threshold is how many memories written since its last run (Written) make a
	// namespace's consolidator run (default 50; negative: never on writes).
	Threshold int
	// RunTimeout bounds one run (default 5m).
	RunTimeout time.Duration
	// CloseTimeout bounds Close (default 10s).
	CloseTimeout time.Duration
	// Clock tells the time and sets the schedule's timers (default SystemClock).
	Clock Clock
	// System is the actor system to run in (nil: one of the Scheduler's own, shut
	// down by Close).
	System *actor.ActorSystem
	// Logger receives failures and restarts (default: discarded).
	Logger *slog.Logger
	// OnRun, when set, is called after every run, from the actor that ran it: for
	// metrics and tests. It must not block.
	OnRun func(Outcome)
}

func (c *SchedulerConfig) withDefaults() {
	if c.Interval == 0 {
		c.Interval = 10 * time.Minute
	}
	if c.Threshold == 0 {
		c.Threshold = 50
	}
	if c.RunTimeout <= 0 {
		c.RunTimeout = 5 * time.Minute
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Consolidator.Now == nil {
		c.Consolidator.Now = c.Clock.Now
	}
	if c.Consolidator.Logger == nil {
		c.Consolidator.Logger = c.Logger
	}
}

// Validate reports a configuration a Scheduler cannot start with.
func (c SchedulerConfig) Validate() error {
	if c.Open == nil {
		return errors.New("consolidator: SchedulerConfig.Open is required")
	}
	return c.Consolidator.Validate()
}

// Errors of a Scheduler.
var (
	// ErrClosed answers a Scheduler used after Close.
	ErrClosed = errors.New("consolidator: scheduler closed")
	// ErrNotOwned, wrapped by SchedulerConfig.Open's error, says the namespace is
	// another's to consolidate (a node that no longer owns it after a rebalance): the
	// run is no failure, and the namespace's actor stops until its next message.
	ErrNotOwned = errors.New("consolidator: the namespace is consolidated elsewhere")
	// ErrCloseTimeout means Close gave up waiting for the actors to stop (a run that
	// ignores its context).
	ErrCloseTimeout = errors.New("consolidator: actors did not stop in time")
)

// Scheduler runs one NamespaceActor per memory namespace, spawned on the first
// message for it (Schedule, Wake, Notify, Consolidate) and kept until the namespace
// is idle (a run on the schedule with nothing to do and nothing written or asked
// since the run before) or Close. The
// memory layer tells it of writes (Notify); a node Schedules each namespace it opens,
// so that each has its schedule. Its methods are safe for concurrent use.
type Scheduler struct {
	system       *actor.ActorSystem
	ownSystem    bool
	host         *actor.PID
	clock        Clock
	cancel       context.CancelFunc
	closeTimeout time.Duration
	closed       atomic.Bool
	once         sync.Once
	closeErr     error
	deps         *deps
}

// NewScheduler starts a Scheduler.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	c, err := New(cfg.Consolidator)
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	d := &deps{open: cfg.Open, consolidator: c, interval: cfg.Interval, threshold: cfg.Threshold,
		runTimeout: cfg.RunTimeout, clock: cfg.Clock, logger: cfg.Logger, onRun: cfg.OnRun, base: base}
	s := &Scheduler{system: cfg.System, clock: cfg.Clock, cancel: cancel, closeTimeout: cfg.CloseTimeout, deps: d}
	if s.system == nil {
		logger := cfg.Logger
		s.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
		s.ownSystem = true
	}
	s.host = s.system.Root.Spawn(hostProps(d))
	return s, nil
}

// Namespaces returns how many namespaces have a consolidator now: those used since
// their last idle run (see NamespaceActor).
func (s *Scheduler) Namespaces() int { return int(s.deps.namespaces.Load()) }

// Notify tells the namespace's consolidator that written memories were just written.
func (s *Scheduler) Notify(namespace string, written int) {
	s.send(namespace, &Written{Count: written})
}

// Schedule starts the namespace's schedule unless it has one: its consolidator runs
// Interval from now (and on writes and requests, as always), not now. A node
// schedules each namespace the first time it opens it (a write, a search), so that
// a namespace only read is maintained too, and a run a crash cut short is taken up
// again.
func (s *Scheduler) Schedule(namespace string) {
	s.send(namespace, &Scheduled{})
}

// Wake asks the namespace's consolidator to run now (unless a run starts before it
// gets to this request).
func (s *Scheduler) Wake(namespace string) {
	s.send(namespace, &Wake{At: s.clock.Now()})
}

// Consolidate runs the namespace's consolidator now, after any run in progress, with
// the idempotency key (empty: one of its own), and returns its report: the memory
// tool's consolidate action and `node memory consolidate`. ctx bounds the wait and
// the run.
func (s *Scheduler) Consolidate(ctx context.Context, namespace, key string) (Report, error) {
	if err := memory.CheckNamespace(namespace); err != nil {
		return Report{}, err
	}
	reply := make(chan Outcome, 1)
	if !s.send(namespace, &Consolidate{Key: key, Reply: reply, ctx: ctx}) {
		return Report{}, ErrClosed
	}
	select {
	case out := <-reply:
		return out.Report, out.Err
	case <-ctx.Done():
		return Report{}, fmt.Errorf("consolidator: %s: %w", namespace, ctx.Err())
	}
}

func (s *Scheduler) send(namespace string, msg any) bool {
	if s.closed.Load() {
		return false
	}
	s.system.Root.Send(s.host, &toNamespace{namespace: namespace, msg: msg})
	return true
}

// Close ends the runs in progress (through their context) and stops every actor,
// waiting at most CloseTimeout. It is idempotent: later calls return the first's
// result.
func (s *Scheduler) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.cancel()
		if !s.ownSystem && s.system.IsStopped() {
			// Its owner shut the system down first (a node does): the actors
			// are stopped, and a stop request would never be answered.
			return
		}
		// Not StopFuture: its future gives up after protoactor's fixed 10 s, and
		// a stop that took longer on a loaded machine failed Close within its
		// CloseTimeout. actors.AwaitStop waits as long as its ctx lets it.
		ctx, cancel := context.WithTimeout(context.Background(), s.closeTimeout)
		defer cancel()
		if err := actors.AwaitStop(ctx, s.system, s.host, s.system.Root.Stop); err != nil {
			s.closeErr = ErrCloseTimeout
		}
		if s.ownSystem {
			s.system.Shutdown()
		}
	})
	return s.closeErr
}

// toNamespace carries a message to the consolidator of a namespace.
type toNamespace struct {
	namespace string
	msg       any
}

// delivery is a message the host hands a NamespaceActor: the seq-th it sent to that
// actor.
type delivery struct {
	seq uint64
	msg any
}

// idle is a NamespaceActor's word to the host that its namespace is idle (a run on
// the schedule found nothing to do, and nothing was written or asked since the run
// before): the host stops it if seq, the last delivery it handled, is the last the
// host sent it, so that no message for the namespace is lost in its mailbox.
type idle struct {
	namespace string
	pid       *actor.PID
	seq       uint64
}

// child is one NamespaceActor of the host, and how many messages the host sent it.
type child struct {
	pid  *actor.PID
	sent uint64
}

// host spawns and supervises the NamespaceActors. It is never restarted (that would
// stop every namespace's actor): a failure of its own is logged and it resumes.
type host struct {
	deps     *deps
	children map[string]*child
	byPID    map[string]string
	// stopping is set once the host stops. protoactor still hands a stopping
	// actor the user messages of its mailbox (system messages, Stop among them,
	// come first), and a child spawned then is never stopped: the host waited for
	// it for ever, and Close for its whole CloseTimeout.
	stopping bool
}

func hostProps(d *deps) *actor.Props {
	logger := d.logger
	restart := func(reason any) actor.Directive {
		logger.Error("a memory consolidator failed; it restarts", slog.Any("reason", reason))
		return actor.RestartDirective
	}
	resume := func(reason any) actor.Directive {
		logger.Error("the consolidator host failed on a message; it drops it and goes on", slog.Any("reason", reason))
		return actor.ResumeDirective
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &host{deps: d, children: map[string]*child{}, byPID: map[string]string{}}
	},
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, restart)),
		actor.WithGuardian(actor.NewOneForOneStrategy(0, 0, resume)))
}

// forget drops a namespace's actor from the host's maps.
func (h *host) forget(ns string, pid *actor.PID) {
	delete(h.children, ns)
	delete(h.byPID, pid.Id)
	h.deps.namespaces.Add(-1)
}

// Receive implements actor.Actor.
func (h *host) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping:
		h.stopping = true
	case *toNamespace:
		if h.stopping {
			if c, ok := m.msg.(*Consolidate); ok && c.Reply != nil {
				c.Reply <- Outcome{Namespace: m.namespace, Err: ErrClosed} // room for one answer
			}
			return
		}
		c, ok := h.children[m.namespace]
		if _, sched := m.msg.(*Scheduled); sched && ok {
			// It changes nothing for a namespace that has a consolidator, and must
			// not keep it from stopping when idle: a run opens its namespace, and
			// the node schedules every namespace it opens, so a namespace folded
			// again by its own run (released after its idle timeout) was never
			// idle, and was loaded again at every run, for ever.
			return
		}
		if !ok {
			ns, d, seq := m.namespace, h.deps, new(uint64) // seq outlives a restart
			// Counted before it is spawned: the actor starts (and arms its
			// schedule, and may run) on its own goroutine at once, and Namespaces
			// read meanwhile said 0 while it ran (a flake of
			// TestSchedulerKeepsTheConsolidatorOfAUsedNamespace under the race
			// detector).
			h.deps.namespaces.Add(1)
			c = &child{pid: ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &NamespaceActor{ns: ns, deps: d, seq: seq} }))}
			h.children[ns] = c
			h.byPID[c.pid.Id] = ns
		}
		c.sent++
		ctx.Send(c.pid, &delivery{seq: c.sent, msg: m.msg})
	case *idle:
		// Stopped only when nothing sent to it waits in its mailbox; the next
		// message for the namespace spawns a new actor, with a new schedule.
		if c, ok := h.children[m.namespace]; ok && c.pid.Id == m.pid.Id && c.sent == m.seq {
			// Stopped before it is no longer counted: once Namespaces says it
			// is gone, its Stop is in its mailbox, ahead of any tick sent later.
			ctx.Stop(c.pid)
			h.forget(m.namespace, c.pid)
			h.deps.logger.Debug("memory consolidation of an idle namespace stops until its next use", "namespace", m.namespace)
		}
	case *actor.Terminated:
		if ns, ok := h.byPID[m.Who.Id]; ok {
			h.forget(ns, m.Who)
		}
	}
}
