package actors

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/asynkron/protoactor-go/actor"
)

// wakeupProbe holds pointers, so that it is not one of the tiny objects the runtime
// packs together (a weak pointer to one of them stays set while its neighbours live).
type wakeupProbe struct{ got []any }

func (p *wakeupProbe) Receive(ctx actor.Context) { p.got = append(p.got, ctx.Message()) }

// A stopped wakeup lets go of its actor, although Go's runtime keeps a stopped timer,
// callback included, in its timer heap until the time it was set for. Armed timers
// are made before and after it, so that it sits inside the heap, where the runtime
// does not clear it out early (it drops stopped timers from the ends of the heap,
// or all of them once they are a quarter of it). A time.AfterFunc whose callback
// names the PID fails this test.
func TestStoppedWakeupLetsGoOfItsActor(t *testing.T) {
	sys := quietSystem()
	t.Cleanup(sys.Shutdown)
	arm := func(d time.Duration) {
		for range 64 {
			armed := time.AfterFunc(d, func() {})
			t.Cleanup(func() { armed.Stop() })
		}
	}
	var probe weak.Pointer[wakeupProbe]
	func() {
		p := &wakeupProbe{}
		probe = weak.Make(p)
		pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
		arm(time.Hour)
		w := newWakeup(sys.Root, pid, time.Hour, &idleTimeout{})
		arm(2 * time.Hour)
		w.stop()
		sys.Root.Send(pid, "hello") // now the PID caches its process
		sys.Root.Stop(pid)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for probe.Value() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the actor of a stopped wakeup is still reachable after 10 s")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// chanProbe hands each message it receives to got.
type chanProbe struct{ got chan any }

func (p *chanProbe) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*idleTimeout); ok {
		p.got <- ctx.Message()
	}
}

// An idle wakeup sends nothing while a message is being handled, however long,
// sends its message once none was handled for its wait, and, after it did, waits
// again from the next message handled.
func TestIdleWakeupWaitsFromTheLastMessage(t *testing.T) {
	sys := quietSystem()
	t.Cleanup(sys.Shutdown)
	p := &chanProbe{got: make(chan any, 4)}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	const after = 20 * time.Millisecond
	w := newIdleWakeup(sys.Root, pid, after, &idleTimeout{})
	t.Cleanup(w.stop)
	w.handling()
	select {
	case <-p.got:
		t.Fatal("an idle wakeup fired while a message was being handled")
	case <-time.After(5 * after):
	}
	w.handled()
	select {
	case <-p.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no idle message 10 s after the last message was handled")
	}
	// Fired: nothing more until a message is handled, then again after the wait.
	select {
	case <-p.got:
		t.Fatal("an idle wakeup fired twice without a message handled between")
	case <-time.After(5 * after):
	}
	w.handling()
	w.handled()
	select {
	case <-p.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no idle message after a message handled once the wakeup had fired")
	}
	w.stop()
	w.handling()
	w.handled()
	select {
	case <-p.got:
		t.Fatal("a stopped idle wakeup fired")
	case <-time.After(5 * after):
	}
}
