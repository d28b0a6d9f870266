package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workers runs functions on goroutines that live on between them, up to max at
// once, and on goroutines of their own past that: it never queues a function and
// never blocks its caller. A goroutine kept from one function to the next keeps the
// stack the last one grew (SQLite's and encoding/json's calls are deep), where a new
// one would grow it again, copying it at each step. A worker idle for idleFor ends.
//
// The session actors' mailboxes run on one (SessionDeps, as their protoactor
// dispatcher), and LocalEffects runs its calls on another.
type workers struct {
	max     int32
	idleFor time.Duration
	live    atomic.Int32
	idle    chan func() // unbuffered: a send succeeds only when a worker waits
}

func newWorkers(max int, idleFor time.Duration) *workers {
	return &workers{max: int32(max), idleFor: idleFor, idle: make(chan func())}
}

// Go runs fn on a waiting worker, a new one, or, with max of them busy, a goroutine
// of its own.
func (w *workers) Go(fn func()) {
	select {
	case w.idle <- fn:
		return
	default:
	}
	if w.live.Add(1) <= w.max {
		go w.run(fn)
		return
	}
	w.live.Add(-1)
	go fn()
}

func (w *workers) run(fn func()) {
	defer w.live.Add(-1)
	idle := time.NewTimer(w.idleFor)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(w.idleFor)
		select {
		case fn = <-w.idle:
		case <-idle.C:
			return
		}
	}
}

// dispatcher runs actors' mailboxes on w (actor.Dispatcher), throughput messages at
// a time, as protoactor's default dispatcher does on new goroutines.
type dispatcher struct {
	w          *workers
	throughput int
}

var _ actor.Dispatcher = dispatcher{}

func (d dispatcher) Schedule(fn func()) { d.w.Go(fn) }
func (d dispatcher) Throughput() int    { return d.throughput }
