package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workers runs functions on goroutines that live on between them, up to max at
// once, and on goroutines of their own past that: it never queues a function and
// never blocks its caller. A goroutine kept from one function to the next keeps the
// stack the last one grew (SQLite's and encoding/json's calls are deep), where a new
// one would grow it again, copying it at each step.
//
// Workers left idle end: every idleFor, as many of them end as stayed waiting through
// the whole period (the fewest that waited at once, since the last sweep). A waiting
// worker waits on one channel, with no timer of its own: handing it a function costs
// a channel send, not a select and a timer's reset at each function. The sweep is
// one timer per pool, armed while any worker lives.
//
// The session actors' mailboxes run on one (SessionDeps, as their protoactor
// dispatcher), and LocalEffects runs its calls on another.
type workers struct {
	max     int32
	idleFor time.Duration
	live    atomic.Int32
	idle    chan job // unbuffered: a send succeeds only when a worker waits
	// waiting counts the workers waiting on idle (a worker adds itself before it
	// waits, the sender that hands it a function takes it off); fewest is the least
	// it was since the last sweep.
	waiting, fewest atomic.Int32

	mu    sync.Mutex
	sweep *time.Timer // calls retire while armed
	armed bool
}

func newWorkers(max int, idleFor time.Duration) *workers {
	return &workers{max: int32(max), idleFor: idleFor, idle: make(chan job)}
}

// job is what a worker runs: a function (funcJob), or a value that runs itself (an
// effect's flight), which needs no closure made for it.
type job interface{ run() }

type funcJob func()

func (f funcJob) run() { f() }

// Go runs fn on a waiting worker, a new one, or, with max of them busy, a goroutine
// of its own.
func (w *workers) Go(fn func()) { w.Do(funcJob(fn)) }

// Do runs j as Go runs a function.
func (w *workers) Do(j job) {
	select {
	case w.idle <- j:
		w.handed()
		return
	default:
	}
	if w.live.Add(1) <= w.max {
		w.arm()
		go w.run(j)
		return
	}
	w.live.Add(-1)
	go j.run()
}

// handed takes a worker off the waiting ones, once it was handed a function (or
// told to end), and keeps the fewest waiting since the last sweep.
func (w *workers) handed() {
	n := w.waiting.Add(-1)
	for {
		least := w.fewest.Load()
		if n >= least || w.fewest.CompareAndSwap(least, n) {
			return
		}
	}
}

func (w *workers) run(j job) {
	defer w.live.Add(-1)
	for j != nil {
		j.run()
		w.waiting.Add(1)
		j = <-w.idle // nil: retire ends this worker
	}
}

// arm arms the sweep unless it is armed.
func (w *workers) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed {
		return
	}
	w.armed = true
	w.fewest.Store(w.waiting.Load())
	if w.sweep == nil {
		w.sweep = time.AfterFunc(w.idleFor, w.retire)
		return
	}
	w.sweep.Reset(w.idleFor)
}

// retire ends the workers that waited through the whole period since the last
// sweep, and arms the sweep again while workers live.
func (w *workers) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for idle := w.fewest.Load(); idle > 0; idle-- {
		select {
		case w.idle <- nil:
			w.waiting.Add(-1)
		default:
			idle = 0 // none waits: they got work meanwhile
		}
	}
	w.fewest.Store(w.waiting.Load())
	// A worker told to end may not have ended yet: its pool is armed once more,
	// and the next sweep finds none live and stops.
	if w.live.Load() > 0 {
		w.sweep.Reset(w.idleFor)
		return
	}
	w.armed = false
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
