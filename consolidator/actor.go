package consolidator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Clock tells the time and sets timers: the wall clock in a node (SystemClock), a
// fake one in tests, so that a schedule is tested without waiting for it.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on a goroutine of its own once d has passed, unless the
	// timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer set by a Clock.
type Timer interface {
	// Stop prevents the call; it reports whether it did (false: already called).
	Stop() bool
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Written tells the consolidator of a namespace that Count memories were just written
// to it. Once the memories written since its last run reach Threshold, it runs.
type Written struct {
	Count int
}

// Wake asks the consolidator of a namespace to run now. A run that started at or
// after At covers it (several wakes queued behind one run make one more run, not one
// each); a zero At always runs.
type Wake struct {
	At time.Time
}

// Scheduled starts the schedule of the consolidator of a namespace: the actor it
// spawns runs Interval later. To one that runs already it changes nothing.
type Scheduled struct{}

// Consolidate asks the consolidator of a namespace to run now with an idempotency key
// (empty: one of its own) and to send the outcome on Reply, which must have room for
// it: the actor does not wait.
type Consolidate struct {
	Key   string
	Reply chan<- Outcome
	// ctx is the asker's: the run stops when it is done.
	ctx context.Context
}

// Outcome is what one run of a namespace's consolidator gave.
type Outcome struct {
	Namespace string
	// Cause says what started the run: "schedule: every 10m0s", "threshold: 55
	// written ≥ 50", "asked".
	Cause  string
	Report Report
	Err    error
}

// tick is the schedule's wakeup; gen tells a stale one (armed before the last run)
// from the current one.
type tick struct{ gen int }

// deps are what the consolidators of a Scheduler share.
type deps struct {
	open         func(ctx context.Context, namespace string) (Target, error)
	consolidator *Consolidator
	interval     time.Duration
	threshold    int
	runTimeout   time.Duration
	clock        Clock
	logger       *slog.Logger
	onRun        func(Outcome)
	// base ends every run when the Scheduler closes.
	base context.Context
	// namespaces counts the NamespaceActors running (Scheduler.Namespaces).
	namespaces atomic.Int64
}

// NamespaceActor consolidates one memory namespace: it runs on its schedule (every
// Interval since its last run), when the memories written since its last run reach
// Threshold (Written), and when asked (Wake, Consolidate); Scheduled only spawns it.
// It runs one pass at a time, in its own Receive, so messages that arrive during a
// run wait for it; every change a run makes is an event of the namespace, made
// through the Target. After a run on the schedule that found nothing to do, with
// nothing written or asked since the run before, it tells the host it is idle, and
// the host stops it if no message for it is on its way (see idle).
//
// Supervision: its parent (the Scheduler's host) restarts it when a run panics, up to
// 10 times a minute, and stops it past that; the next message for the namespace
// spawns a new one. A restart loses only the count of memories written since the last
// run; the schedule starts again from the restart, and the actor still stops when
// its namespace is idle.
type NamespaceActor struct {
	ns      string
	deps    *deps
	pending int
	gen     int
	alarm   *alarm
	// lastStart is when the last run started (the clock's time).
	lastStart time.Time
	runs      int
	// seq is the host's number of the last message handled (delivery). It is
	// the host's, shared by the actor's incarnations: one restarted after a
	// panic, starting from 0, was refused its every word that it was idle (the
	// host having sent it more), and its namespace ran and was loaded every
	// Interval, for ever.
	seq *uint64
	// touched says that memories were written, or a run asked, since the last run.
	touched bool
	// stalled are the questions the last run was cut short on (Report.Stalled):
	// the next run asks them last (AskLast). Kept while the actor lives: a
	// restart, or a new actor after the namespace went idle, starts without them,
	// and its first run asks them in the plan's order again (each question having
	// at most half of what remains of the run while others wait after it).
	stalled []string
	// settled are the answers of the model that changed nothing (Report.Settled):
	// the next run does not ask their questions again (Settled). Kept while the
	// actor lives, as stalled.
	settled []string
}

var _ actor.Actor = (*NamespaceActor)(nil)

// Receive implements actor.Actor.
func (a *NamespaceActor) Receive(ctx actor.Context) {
	msg := ctx.Message()
	if d, ok := msg.(*delivery); ok {
		*a.seq, msg = d.seq, d.msg
	}
	switch m := msg.(type) {
	case *actor.Started:
		a.arm(ctx)
	case *actor.Restarting, *actor.Stopping:
		a.alarm.stop()
	case *Scheduled:
		// Started armed the schedule; a schedule running already is kept.
	case *Written:
		if m.Count <= 0 {
			return
		}
		a.pending += m.Count
		a.touched = true
		if t := a.deps.threshold; t > 0 && a.pending >= t {
			a.run(ctx, fmt.Sprintf("threshold: %d written ≥ %d", a.pending, t), "", nil, nil)
		}
	case *Wake:
		a.touched = true
		if !m.At.IsZero() && m.At.Before(a.lastStart) {
			return
		}
		a.run(ctx, "asked", "", nil, nil)
	case *Consolidate:
		a.run(ctx, "asked", m.Key, m.ctx, m.Reply)
	case *tick:
		if m.gen != a.gen {
			return
		}
		touched := a.touched
		out := a.run(ctx, fmt.Sprintf("schedule: every %s", a.deps.interval), "", nil, nil)
		if errors.Is(out.Err, ErrNotOwned) || !touched && out.Err == nil && len(out.Report.Decisions) == 0 && len(a.stalled) == 0 {
			// Idle: nothing written or asked since the run before, and nothing to
			// do now (no question it was cut short on to ask last). The actor stops (the host decides, seeing its mailbox empty),
			// so that a node does not load every namespace it ever used each
			// Interval, nor keep an actor for each; the namespace's next use (a
			// write, a request, its next load) spawns one again.
			ctx.Send(ctx.Parent(), &idle{namespace: a.ns, pid: ctx.Self(), seq: *a.seq})
		}
	}
}

// arm sets the schedule's next wakeup, Interval from now.
func (a *NamespaceActor) arm(ctx actor.Context) {
	a.alarm.stop()
	a.gen++
	if a.deps.interval > 0 {
		a.alarm = newAlarm(a.deps.clock, ctx.ActorSystem().Root, ctx.Self(), a.deps.interval, &tick{gen: a.gen})
	}
}

// run consolidates the namespace once. A panic is reported (onRun, reply) and goes
// on to the supervisor.
func (a *NamespaceActor) run(ctx actor.Context, cause, key string, asker context.Context, reply chan<- Outcome) Outcome {
	a.alarm.stop()
	a.lastStart = a.deps.clock.Now()
	a.pending = 0
	a.touched = false
	a.runs++
	if key == "" {
		key = fmt.Sprintf("consolidator/%s/%d", a.lastStart.UTC().Format("20060102T150405.000000000Z"), a.runs)
	}
	runCtx, cancel := context.WithTimeout(a.deps.base, a.deps.runTimeout)
	defer cancel()
	if asker != nil {
		stop := context.AfterFunc(asker, cancel)
		defer stop()
	}
	out := Outcome{Namespace: a.ns, Cause: cause}
	done := func() {
		if a.deps.onRun != nil {
			a.deps.onRun(out)
		}
		if reply != nil {
			reply <- out
		}
	}
	defer func() {
		if r := recover(); r != nil {
			out.Err = fmt.Errorf("consolidator: the run of %s panicked: %v", a.ns, r)
			a.deps.logger.Error("memory consolidation panicked; the actor restarts", "namespace", a.ns, "cause", cause, "panic", r)
			done()
			panic(r)
		}
	}()
	t, err := a.deps.open(runCtx, a.ns)
	if err == nil {
		if r, ok := t.(Releaser); ok {
			defer r.Release()
		}
		out.Report, err = a.deps.consolidator.Run(runCtx, t, key, AskLast(a.stalled...), Settled(a.settled...))
		a.stalled = out.Report.Stalled
		// Those that still hold and the run's own, or all of them when the run
		// did not plan (Report.Settled): an answer about memories since changed,
		// forgotten or merged is dropped, even by a run cut short (before, a
		// namespace whose runs ran out of time kept every answer it ever got).
		a.settled = out.Report.Settled
	}
	switch {
	case errors.Is(err, ErrNotOwned):
		out.Err = fmt.Errorf("consolidator: %s: %w", a.ns, err)
		a.deps.logger.Debug("memory consolidation skipped: the namespace is another's", "namespace", a.ns, "error", err)
	case err != nil:
		out.Err = fmt.Errorf("consolidator: %s: %w", a.ns, err)
		a.deps.logger.Warn("memory consolidation failed", "namespace", a.ns, "cause", cause, "error", err)
	}
	done()
	a.arm(ctx)
	return out
}

// alarm sends an actor a message of its own after a delay, as actors' wakeup does:
// the timer's callback reaches the actor only through target, which stop clears, so
// a stopped alarm does not keep a stopped actor reachable until it would have rung.
type alarm struct {
	timer  Timer
	target atomic.Pointer[actor.PID]
}

func newAlarm(clock Clock, root *actor.RootContext, pid *actor.PID, d time.Duration, msg any) *alarm {
	w := &alarm{}
	w.target.Store(pid)
	w.timer = clock.AfterFunc(d, func() {
		if pid := w.target.Load(); pid != nil {
			root.Send(pid, msg)
		}
	})
	return w
}

// stop sends nothing any more. w may be nil.
func (w *alarm) stop() {
	if w != nil {
		w.timer.Stop()
		w.target.Store(nil)
	}
}
