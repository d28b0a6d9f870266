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
