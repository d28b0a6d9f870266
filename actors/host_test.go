package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// gatedModel answers the calls of sessions whose ID starts with "busy" only once
// release is closed (it reports each such call on started); it answers every other
// call at once. It counts calls per idempotency key.
type gatedModel struct {
	llm.Model
	started chan string
	release chan struct{}
	mu      sync.Mutex
	calls   map[string]int
}

func (m *gatedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls[r.Key]++
	m.mu.Unlock()
	if strings.HasPrefix(r.Key, "busy") {
		m.started <- r.Key
		select {
		case <-m.release:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	return m.Model.Generate(ctx, r)
}

func (m *gatedModel) callsOf(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[key]
}

// hostFailures collects the supervision events of one actor (the host).
type hostFailures struct {
	mu     sync.Mutex
	events []*actor.SupervisorEvent
}

func watchFailures(t *testing.T, sys *actor.ActorSystem, host *actor.PID) *hostFailures {
	f := &hostFailures{}
	sub := sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && e.Child.Equal(host) {
			f.mu.Lock()
			f.events = append(f.events, e)
			f.mu.Unlock()
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	return f
}

func (f *hostFailures) list() []*actor.SupervisorEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*actor.SupervisorEvent(nil), f.events...)
}

func (h *harness) sessions() int {
	h.t.Helper()
	n, err := h.system.Root.RequestFuture(h.host, &actors.CountSessions{}, 5*time.Second).Result()
	if err != nil {
		h.t.Fatalf("the session host does not answer: %v", err)
	}
	return n.(int)
}

// Idle sessions passivate while another session waits on its model: the host stops
// only the idle ones, never fails, and the busy session's call completes and is
// recorded once.
func TestSessionsPassivateWhileOthersAreMidCall(t *testing.T) {
	model := &gatedModel{Model: llm.Offline{}, started: make(chan string, 4), release: make(chan struct{}), calls: map[string]int{}}
	h := newHarness(t, harnessOpts{idle: 20 * time.Millisecond, model: model})
	failures := watchFailures(t, h.system, h.host)

	h.submit("busy", "t-busy", "echo still here")
	var key string
	select {
	case key = <-model.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy session never called its model")
	}
	const idle = 8
	for i := range idle {
		id := fmt.Sprintf("quick-%d", i)
		h.submit(id, "t-"+id, "echo "+id)
		h.wait(id)
	}
	// Every quick session passivates; the busy one stays.
	waitUntil(t, "the quick sessions passivated", func() bool { return h.sessions() == 1 })
	close(model.release)
	events := h.wait("busy")
	assertGapFree(t, events)
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "still here" {
		t.Fatalf("busy session's output %q", got)
	}
	if n := model.callsOf(key); n != 1 {
		t.Fatalf("the busy session's model call %s was made %d times, want once", key, n)
	}
	waitUntil(t, "the busy session passivated", func() bool { return h.sessions() == 0 })
	if f := failures.list(); len(f) > 0 {
		t.Fatalf("the session host failed %d times, first: %v", len(f), f[0].Reason)
	}
}

// A failure inside the host (here a malformed message) neither restarts it nor
// stops its sessions: the session mid-call finishes.
func TestHostFailureKeepsItsSessions(t *testing.T) {
	model := &gatedModel{Model: llm.Offline{}, started: make(chan string, 4), release: make(chan struct{}), calls: map[string]int{}}
	h := newHarness(t, harnessOpts{model: model})
	failures := watchFailures(t, h.system, h.host)

	h.submit("busy", "t-busy", "echo survived")
	var key string
	select {
	case key = <-model.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy session never called its model")
	}
	h.system.Root.Send(h.host, (*actors.CancelTask)(nil))
	waitUntil(t, "the host reported its failure", func() bool { return len(failures.list()) > 0 })
	if n := h.sessions(); n != 1 {
		t.Fatalf("after its failure the host runs %d sessions, want 1", n)
	}
	close(model.release)
	events := h.wait("busy")
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "survived" {
		t.Fatalf("busy session's output %q", got)
	}
	if n := model.callsOf(key); n != 1 {
		t.Fatalf("model call %s was made %d times, want once", key, n)
	}
	for _, f := range failures.list() {
		if f.Directive != actor.ResumeDirective {
			t.Fatalf("the host was handled with %v, want it resumed with its sessions", f.Directive)
		}
	}
}
