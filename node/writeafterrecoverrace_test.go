package node_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// keyCountingMemoryModel is a memory model that finds no fact in any turn, and
// counts the calls it was asked for per idempotency key (a turn's extraction is
// "<session>/<seq>/<task ID>/extract").
type keyCountingMemoryModel struct {
	mu    sync.Mutex
	calls map[string]int
}

func (m *keyCountingMemoryModel) Name() string { return "counting" }

func (m *keyCountingMemoryModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls[req.Key]++
	m.mu.Unlock()
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: `{"facts": []}`}}, nil
}

// of returns the calls per key of session's turns.
func (m *keyCountingMemoryModel) of(session string) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, c := range m.calls {
		if strings.HasPrefix(k, session+"/") {
			out[k] = c
		}
	}
	return out
}

// recoveryGateLog is a SQLite log whose listing of the write after task's
// recovery (the only Sessions call with a Limit) waits, once, for gate: entered
// is closed as it begins to wait.
type recoveryGateLog struct {
	*sqlite.Log
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (l *recoveryGateLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Limit > 0 {
		l.once.Do(func() {
			close(l.entered)
			select {
			case <-l.gate:
			case <-ctx.Done():
			}
		})
	}
	return l.Log.Sessions(ctx, f)
}

// TestWriteAfterTaskFirstTurnIsExtractedOnceDuringTheStartRecovery: a node's
// first turn completes while its start's recovery of the turns not remembered
// yet lists the sessions. The recovery then finds the turn in the log, with
// nothing in the namespace for it, and remembers it; the live write after task
// of the same turn, queued behind the recovery, came next and extracted it
// again: two memory-model calls for one turn. The live job now skips a turn
// this process remembered already.
func TestWriteAfterTaskFirstTurnIsExtractedOnceDuringTheStartRecovery(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &recoveryGateLog{Log: base, entered: make(chan struct{}), gate: make(chan struct{})}
	var once sync.Once
	open := func() { once.Do(func() { close(lg.gate) }) }
	t.Cleanup(open)
	mm := &keyCountingMemoryModel{calls: map[string]int{}}
	model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Log: lg, Model: model, Memory: &memory.Config{Model: mm},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true})
	select {
	case <-lg.entered:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the start's recovery never listed the sessions")
	}
	nodetest.Run(t, n, "s-first", "Hello, this is my first message.")
	open() // the recovery lists the sessions: the first turn is among them
	// The turns are remembered in order: once the next one's is asked for, the
	// first one's live job is done.
	nodetest.Run(t, n, "s-next", "Hello again.")
	waitFor(t, 30*time.Second, "the next turn is remembered", func() bool { return len(mm.of("s-next")) > 0 })
	calls := mm.of("s-first")
	if len(calls) != 1 {
		t.Fatalf("the first turn's memory-model calls per key: %v, want one extraction", calls)
	}
	for k, c := range calls {
		if c != 1 || !strings.HasSuffix(k, "/extract") || len(strings.Split(k, "/")) != 4 {
			t.Errorf("the first turn was extracted %d times under %q, want once under <session>/<seq>/<task ID>/extract", c, k)
		}
	}
}

// gatedKeyModel is a keyCountingMemoryModel whose first call of a key that
// starts with hold waits for gate; entered is closed as it begins to wait.
type gatedKeyModel struct {
	*keyCountingMemoryModel
	hold    string
	held    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (m *gatedKeyModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if strings.HasPrefix(req.Key, m.hold) && m.held.CompareAndSwap(false, true) {
		close(m.entered)
		select {
		case <-m.gate:
		case <-ctx.Done():
		}
	}
	return m.keyCountingMemoryModel.Generate(ctx, req)
}

// TestWriteAfterTaskRecoveryReadsTheNamespaceAgainBeforeAnExtraction: a
// recovery reads each namespace once a pass, at its first turn of it. Here it
// remembers a turn of namespace agent:x, then waits on the memory model for a
// turn of agent:y while another node's recovery remembers the turns of both,
// among them a later turn of agent:x. The first recovery, going on, took that
// turn for one not remembered (its agent:x was read before) and extracted it
// again. It now reads the namespace's new events right before an extraction.
func TestWriteAfterTaskRecoveryReadsTheNamespaceAgainBeforeAnExtraction(t *testing.T) {
	w := newDurableWorld(t)
	mm := &gatedKeyModel{keyCountingMemoryModel: &keyCountingMemoryModel{calls: map[string]int{}}, hold: "s-two/",
		entered: make(chan struct{}), gate: make(chan struct{})}
	var once sync.Once
	open := func() { once.Do(func() { close(mm.gate) }) }
	t.Cleanup(open)
	config := func(writeAfter bool) node.Config {
		model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
		if err != nil {
			t.Fatal(err)
		}
		return node.Config{Log: w.log, DataDir: t.TempDir(), Model: model, Memory: &memory.Config{Model: mm},
			MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: writeAfter,
			Agents: []node.NamedAgent{
				{Name: "ax", SystemPrompt: "You note.", MemoryNamespace: "agent:x"},
				{Name: "ay", SystemPrompt: "You note.", MemoryNamespace: "agent:y"},
			}}
	}
	// Three turns no node remembered, the oldest first.
	p, stopP := nodetest.StartWithStop(t, config(false))
	for _, s := range []struct{ id, agent string }{{"s-one", "ax"}, {"s-two", "ay"}, {"s-three", "ax"}} {
		if _, err := p.Submit(context.Background(), node.Task{Input: "Hello from " + s.id, SessionID: s.id, Agent: s.agent}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, s.id+" completes", func() bool {
			st, ok, err := p.Status(context.Background(), s.id)
			return err == nil && ok && st.Status == messages.StatusCompleted
		})
	}
	stopP()

	b := nodetest.Start(t, config(true)) // its start's recovery remembers s-one, then waits in s-two's extraction
	select {
	case <-mm.entered:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the recovery never reached s-two")
	}
	if got := mm.of("s-three"); len(got) != 0 {
		t.Fatalf("the recovery reached s-three (%v) before s-two", got)
	}
	cfg := config(true)
	cfg.Resume = node.ResumeNone // its start's recovery picks nothing: the test runs one
	c := nodetest.Start(t, cfg)
	c.RecoverWriteAfterTask(context.Background()) // remembers s-two and s-three
	if got := mm.of("s-three"); len(got) != 1 {
		t.Fatalf("the other node's recovery: s-three's calls %v, want its extraction", got)
	}
	open()
	// The turns are remembered in order: once a later one's is asked for, the
	// recovery is done. Its agent is ay: the task's core blocks, read at
	// ingress, would bring agent:x up to date otherwise.
	if _, err := b.Submit(context.Background(), node.Task{Input: "Hello later", SessionID: "s-later", Agent: "ay"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the later turn is remembered", func() bool { return len(mm.of("s-later")) > 0 })
	for _, s := range []string{"s-one", "s-three"} {
		for k, n := range mm.of(s) {
			if n != 1 {
				t.Errorf("%s was extracted %d times under %q, want once", s, n, k)
			}
		}
	}
}
