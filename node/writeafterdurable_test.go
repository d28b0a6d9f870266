package node_test

import (
	"context"
	"fmt"
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

// switchEmbedder is down (llm.ErrTransient) while down is set, embeds as the
// offline embedder does otherwise, and keeps the texts it embedded.
type switchEmbedder struct {
	mu    sync.Mutex
	down  bool
	texts []string
}

func (e *switchEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		return nil, fmt.Errorf("embedder: HTTP 503: %w", llm.ErrTransient)
	}
	e.texts = append(e.texts, texts...)
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

func (e *switchEmbedder) embedded(word string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.texts {
		if strings.Contains(t, word) {
			return true
		}
	}
	return false
}

// durableWorld is one log and one data directory, for nodes started one after
// the other on them, as one machine's restarts.
type durableWorld struct {
	log  eventlog.Log
	data string
}

func newDurableWorld(t *testing.T) durableWorld {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return durableWorld{log: lg, data: t.TempDir()}
}

// start starts a node of the world with the write after task, and returns it and
// its stop. A node never stopped stands for one killed: it writes nothing more
// (its embedder stays down), and the test's end stops it.
func (w durableWorld) start(t *testing.T, emb llm.Embedder, data string) (*node.Node, func()) {
	t.Helper()
	model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
	if err != nil {
		t.Fatal(err)
	}
	n, stop := nodetest.StartWithStop(t, node.Config{Log: w.log, DataDir: data, Model: model, Memory: &memory.Config{Embedder: emb},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true})
	var once sync.Once
	stopOnce := func() { once.Do(stop) }
	t.Cleanup(stopOnce)
	return n, stopOnce
}

// rememberedFrom waits until the namespace holds a memory that says word, and
// returns the live memories whose source is session.
func rememberedFrom(t *testing.T, n *node.Node, word, session string) []memory.Memory {
	t.Helper()
	ns, err := n.Memories().Namespace(context.Background(), "agent:a")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for {
		if err := ns.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		var found bool
		var from []memory.Memory
		for _, m := range ns.Snapshot() {
			found = found || strings.Contains(m.Content, word)
			for _, s := range m.Sources {
				if s.Kind == "session" && s.ID == session {
					from = append(from, m)
					break
				}
			}
		}
		if found {
			return from
		}
		if time.Now().After(deadline) {
			t.Fatalf("no memory says %q after 30 s", word)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOnce fails unless each memory of from has its own content, and the
// namespace's stream added them once: one memory.added per memory.
func checkOnce(t *testing.T, lg eventlog.Log, from []memory.Memory) {
	t.Helper()
	if len(from) == 0 {
		t.Fatal("no memory came from the turn")
	}
	seen := map[string]bool{}
	for _, m := range from {
		if seen[m.Content] {
			t.Errorf("%q is remembered twice", m.Content)
		}
		seen[m.Content] = true
	}
	events, err := lg.Read(context.Background(), memory.Stream("agent:a"), 1)
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for _, e := range events {
		if e.Type == messages.TypeMemoryAdded {
			added++
		}
	}
	if added != len(from) {
		t.Errorf("the namespace's stream has %d memory.added for %d memories", added, len(from))
	}
}

// A turn waiting for the embedder when its node closes (it is down: the write
// after task is retried, and the close gives up on it) is remembered by the
// node's next start once the embedder is back, once. Before, the queue of
// pending writes was in memory only: the turn was never remembered.
func TestWriteAfterTaskPendingAtCloseIsRememberedAtTheNextStart(t *testing.T) {
	w := newDurableWorld(t)
	n1, stop1 := w.start(t, &switchEmbedder{down: true}, w.data)
	if ev := nodetest.Run(t, n1, "s-close", "I live in Oslo and I like tea."); ev[len(ev)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", ev[len(ev)-1].Type)
	}
	stop1()
	n2, _ := w.start(t, &switchEmbedder{}, w.data)
	checkOnce(t, w.log, rememberedFrom(t, n2, "Oslo", "s-close"))
}

// The same for a node killed (never closed) while its turn waited: the node that
// takes over (another data directory: another machine) remembers it, once.
func TestWriteAfterTaskPendingAtAKillIsRememberedByTheNextNode(t *testing.T) {
	w := newDurableWorld(t)
	n1, _ := w.start(t, &switchEmbedder{down: true}, w.data) // killed: never stopped before the test ends
	if ev := nodetest.Run(t, n1, "s-kill", "I live in Oslo and I like tea."); ev[len(ev)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", ev[len(ev)-1].Type)
	}
	n2, _ := w.start(t, &switchEmbedder{}, t.TempDir())
	checkOnce(t, w.log, rememberedFrom(t, n2, "Oslo", "s-kill"))
}

// A turn remembered before its node was killed is not performed again by the
// next start: its Remember is not run again (the embedder is not asked to embed
// its facts), and the namespace holds its memories once. The next start's turns
// are remembered after the recovery, in order, so the check waits for one.
func TestWriteAfterTaskRememberedBeforeAKillIsNotPerformedAgain(t *testing.T) {
	w := newDurableWorld(t)
	n1, _ := w.start(t, &switchEmbedder{}, w.data) // killed after its write
	nodetest.Run(t, n1, "s-done", "I live in Oslo and I like tea.")
	before := rememberedFrom(t, n1, "Oslo", "s-done")
	emb := &switchEmbedder{}
	n2, _ := w.start(t, emb, t.TempDir())
	nodetest.Run(t, n2, "s-next", "I play chess on Sundays.")
	rememberedFrom(t, n2, "chess", "s-next")
	if emb.embedded("Oslo") {
		t.Error("the turn remembered before the kill was remembered again: its facts were embedded again")
	}
	after := rememberedFrom(t, n2, "Oslo", "s-done")
	if len(after) != len(before) {
		t.Errorf("the turn remembered before the kill has %d memories now, %d before", len(after), len(before))
	}
	checkOnce(t, w.log, append(after, rememberedFrom(t, n2, "chess", "s-next")...))
}
