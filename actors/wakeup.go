package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// wakeup sends an actor a message of its own after a delay: a session's idle timeout
// and its task's deadline. It replaces time.AfterFunc with a callback that names the
// actor, and protoactor's receive timeout (whose callback is a method of the actor's
// context), because Go's runtime keeps a stopped timer, callback included, in its
// timer heap until the time it was set for (runtime/time.go: stop only marks it; it
// goes early only from an end of the heap, or once a quarter of the heap of its P is
// stopped timers). A callback holding the actor's PID (which caches its
// process: the mailbox, the context, the actor and its folded state) or its context
// would keep a stopped session reachable for up to its idle timeout (an hour, say).
// The callback of a wakeup reaches the actor only through target, which stop clears.
//
// A wakeup is used by its actor only; the callback runs on a goroutine of the runtime.
type wakeup struct {
	timer  *time.Timer
	target atomic.Pointer[actor.PID]
}

// newWakeup sends msg to pid through root after d, unless stopped or reset first.
func newWakeup(root *actor.RootContext, pid *actor.PID, d time.Duration, msg any) *wakeup {
	w := &wakeup{}
	w.target.Store(pid)
	w.timer = time.AfterFunc(d, func() {
		if pid := w.target.Load(); pid != nil {
			root.Send(pid, msg)
		}
	})
	return w
}

// reset sends the message d from now instead, unless w is stopped.
func (w *wakeup) reset(d time.Duration) {
	if w != nil && w.target.Load() != nil {
		w.timer.Reset(d)
	}
}

// pause holds the message back until the next reset.
func (w *wakeup) pause() {
	if w != nil {
		w.timer.Stop()
	}
}

// stop sends nothing any more and lets go of the actor. w may be nil.
func (w *wakeup) stop() {
	if w != nil {
		w.timer.Stop()
		w.target.Store(nil)
	}
}

// idleWakeup sends an actor a message of its own once it handled no message for a
// while (a session's idle timeout), as a wakeup paused as each message starts and
// reset as it ends would, without touching its timer for each message: busy and
// the time the last message ended are atomics the timer's callback reads when it
// fires, arming the timer again for what is left of the wait. Only a message
// handled after the callback sent its message arms the timer (reset). Its callback
// reaches the actor only through target, as a wakeup's does.
type idleWakeup struct {
	timer  *time.Timer
	target atomic.Pointer[actor.PID]
	after  time.Duration
	// start is when it was made; last is when the last message ended, as a duration
	// since start (monotonic).
	start time.Time
	last  atomic.Int64
	busy  atomic.Bool
	// fired is set once the callback sent its message, until reset arms the timer again.
	fired atomic.Bool
}

// newIdleWakeup sends msg to pid through root once no message was handled for
// after (busy and done bracket each message), unless stopped.
func newIdleWakeup(root *actor.RootContext, pid *actor.PID, after time.Duration, msg any) *idleWakeup {
	w := &idleWakeup{after: after, start: time.Now()}
	w.target.Store(pid)
	w.timer = time.AfterFunc(after, func() {
		pid := w.target.Load()
		if pid == nil {
			return
		}
		if w.busy.Load() {
			w.timer.Reset(w.after)
			return
		}
		if left := w.after - (time.Since(w.start) - time.Duration(w.last.Load())); left > 0 {
			w.timer.Reset(left)
			return
		}
		w.fired.Store(true)
		root.Send(pid, msg)
	})
	return w
}

// handling says a message is being handled: no wait ends meanwhile. w may be nil.
func (w *idleWakeup) handling() {
	if w != nil {
		w.busy.Store(true)
	}
}

// handled says the message ended: the wait counts from now, and starts again if the
// message was sent already. w may be nil.
func (w *idleWakeup) handled() {
	if w == nil || w.target.Load() == nil {
		return
	}
	w.last.Store(int64(time.Since(w.start)))
	w.busy.Store(false)
	if w.fired.Swap(false) {
		w.timer.Reset(w.after)
	}
}

// stop sends nothing any more and lets go of the actor. w may be nil.
func (w *idleWakeup) stop() {
	if w != nil {
		w.timer.Stop()
		w.target.Store(nil)
	}
}
