package node_test

import (
	"context"
	"strings"
	"sync"
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
