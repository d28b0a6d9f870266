package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// readsBySession counts the folds (Reads) of each session.
type readsBySession struct {
	actors.EventStore
	mu    sync.Mutex
	reads map[string]int
}

func (r *readsBySession) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	r.mu.Lock()
	r.reads[id]++
	r.mu.Unlock()
	return r.EventStore.Read(ctx, id, from)
}

func (r *readsBySession) of(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[id]
}

// promptsModel records the last message of each request's prompt, by key.
type promptsModel struct {
	llm.Model
	mu      sync.Mutex
	prompts map[string][]messages.ChatMessage
}

func (m *promptsModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.prompts[r.Key] = append([]messages.ChatMessage(nil), r.Messages...)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func (m *promptsModel) prompt(key string) []messages.ChatMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prompts[key]
}

// limitCounters counts the host's evictions and its starts past the bound.
type limitCounters struct{ evicted, over atomic.Int32 }

func (c *limitCounters) set(max int) func(*actors.SessionDeps) {
	return func(d *actors.SessionDeps) {
		d.MaxLiveSessions = max
		d.OnSessionEvicted = func() { c.evicted.Add(1) }
		d.OnSessionsOverLimit = func() { c.over.Add(1) }
	}
}

// With MaxLiveSessions 8 and an idle timeout that never fires in the test, 50 one-step
// sessions one after another leave at most 8 session actors, the most recently used:
// the oldest idle ones are passivated to make room. A passivated session comes back on
// its next message, folded from the log, with its history.
func TestMaxLiveSessionsPassivatesTheLeastRecentlyUsedIdle(t *testing.T) {
	var store *readsBySession
	model := &promptsModel{Model: llm.Offline{}, prompts: map[string][]messages.ChatMessage{}}
	var c limitCounters
	h := newHarness(t, harnessOpts{model: model, idle: time.Hour, deps: c.set(8),
		store: func(l *sqlite.Log) actors.EventStore {
			store = &readsBySession{EventStore: l, reads: map[string]int{}}
			return store
		}})
	const n = 50
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		h.submit(id, "t1-"+id, "echo first "+id)
		h.wait(id)
		waitUntil(t, fmt.Sprintf("at most 8 session actors after %d sessions", i+1), func() bool { return h.sessions() <= 8 })
	}
	if got := c.evicted.Load(); got < n-8 {
		t.Fatalf("%d sessions passivated to keep within the bound, want at least %d", got, n-8)
	}
	// The most recent session was kept: its next task does not fold it again.
	h.submit("s49", "t2-s49", "echo again")
	if events := h.wait("s49"); len(events) != 8 {
		t.Fatalf("s49: %d events, want 8: %s", len(events), types(events))
	}
	if r := store.of("s49"); r != 1 {
		t.Fatalf("s49, the most recently used session, was folded %d times: it was passivated", r)
	}
	// The oldest was passivated: its next task folds its history back.
	acc := h.submit("s0", "t2-s0", "echo second")
	if acc.Seq != 5 {
		t.Fatalf("s0's new incarnation assigned seq %d, want 5", acc.Seq)
	}
	events := h.wait("s0")
	for len(events) < 8 {
		events = h.wait("s0")
	}
	assertGapFree(t, events)
	if r := store.of("s0"); r != 2 {
		t.Fatalf("s0 was folded %d times, want 2 (passivated to make room, then back)", r)
	}
	var text []string
	for _, m := range model.prompt("s0/6") { // the model call requested at seq 6
		text = append(text, m.Content)
	}
	if all := strings.Join(text, " | "); !strings.Contains(all, "echo first s0") || !strings.Contains(all, "echo second") {
		t.Fatalf("s0's second model call did not see its history: %s", all)
	}
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "second" {
		t.Fatalf("s0's second output %q", got)
	}
}

// A session with a running task is never passivated to make room: with a bound of 1
// and a session waiting on its model, each new session starts anyway (the bound is
// soft, and OnSessionsOverLimit says so) and goes once it is idle; the busy session's
// call is made once, and it is never folded again.
func TestMaxLiveSessionsNeverPassivatesABusySession(t *testing.T) {
	var store *readsBySession
	model := &gatedModel{Model: llm.Offline{}, started: make(chan string, 4), release: make(chan struct{}), calls: map[string]int{}}
	var c limitCounters
	h := newHarness(t, harnessOpts{model: model, idle: time.Hour, deps: c.set(1),
		store: func(l *sqlite.Log) actors.EventStore {
			store = &readsBySession{EventStore: l, reads: map[string]int{}}
			return store
		}})
	h.submit("busy", "t-busy", "echo still here")
	var key string
	select {
	case key = <-model.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy session never called its model")
	}
	const quick = 10
	for i := range quick {
		id := fmt.Sprintf("quick-%d", i)
		h.submit(id, "t-"+id, "echo "+id)
		h.wait(id)
	}
	waitUntil(t, "every quick session passivated to make room", func() bool { return c.evicted.Load() == quick })
	if n := h.sessions(); n != 1 {
		t.Fatalf("%d session actors live, want only the busy one", n)
	}
	if got := c.over.Load(); got != quick {
		t.Fatalf("%d sessions started past the bound, want %d (each quick one, beside the busy one)", got, quick)
	}
	close(model.release)
	events := h.wait("busy")
	assertGapFree(t, events)
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "still here" {
		t.Fatalf("busy session's output %q", got)
	}
	if n := model.callsOf(key); n != 1 {
		t.Fatalf("the busy session's model call was made %d times, want once", n)
	}
	if r := store.of("busy"); r != 1 {
		t.Fatalf("the busy session was folded %d times: it was passivated mid-task", r)
	}
}

// A session actor restarted after a failure (here a write the log refused) still
// passivates when idle: its restarted incarnation counts the messages its host
// forwarded to the one before.
func TestRestartedSessionStillPassivates(t *testing.T) {
	var store *flakyStore
	h := newHarness(t, harnessOpts{model: llm.Offline{}, idle: 20 * time.Millisecond, store: func(l *sqlite.Log) actors.EventStore {
		// The submit is written, then the model's answer is refused: a restart.
		store = &flakyStore{EventStore: l, failAt: 2, err: fmt.Errorf("wrapped: %w", eventlog.ErrSeqConflict)}
		return store
	}})
	h.submit("s", "t", "echo hi")
	h.wait("s")
	if got := store.reads.Load(); got != 2 {
		t.Fatalf("folds: %d, want 2 (the session restarted)", got)
	}
	waitUntil(t, "the restarted session passivated", func() bool { return h.sessions() == 0 })
}
