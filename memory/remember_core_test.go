//go:build memcore

package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// phased is a model the test replaces between phases.
type phased struct {
	mu  sync.Mutex
	cur llm.Model
}

func (p *phased) Name() string { return "phased" }

func (p *phased) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	p.mu.Lock()
	cur := p.cur
	p.mu.Unlock()
	if cur == nil {
		return llm.Response{}, fmt.Errorf("%w: no script for this phase", llm.ErrScriptExhausted)
	}
	return cur.Generate(ctx, req)
}

// next sets the script of the next phase and returns it, to count its calls.
func (p *phased) next(t *testing.T, answers ...string) *counted {
	c := script(t, answers...)
	p.set(c)
	return c
}

func (p *phased) set(m llm.Model) {
	p.mu.Lock()
	p.cur = m
	p.mu.Unlock()
}

// writeFixture is a memory over a SQLite log and an in-memory vector store, with
// the offline embedder and memory IDs m_1, m_2, ….
type writeFixture struct {
	log eventlog.Log
	mem *memory.Memories
}

func newWriteFixture(t *testing.T, model llm.Model, tweak ...func(*memory.Config)) *writeFixture {
	t.Helper()
	log := recallLog(t)
	store, err := vectorstore.Open(vectorstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var n atomic.Int64
	cfg := memory.Config{Log: log, Vectors: store, Model: model, NewID: func() string { return fmt.Sprintf("m_%d", n.Add(1)) }}
	for _, tw := range tweak {
		tw(&cfg)
	}
	mem, err := memory.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	return &writeFixture{log: log, mem: mem}
}

func (f *writeFixture) ns(t *testing.T, name string) *memory.Namespace {
	t.Helper()
	ns, err := f.mem.Namespace(wctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// reasons returns "type: reason" of every event of the namespace's stream.
func (f *writeFixture) reasons(t *testing.T, ns string) []string {
	t.Helper()
	events, err := f.log.Read(wctx(t), memory.Stream(ns), 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		var reason string
		switch p := p.(type) {
		case *messages.MemoryAdded:
			reason = p.Reason
		case *messages.MemoryUpdated:
			reason = p.Reason
		case *messages.MemoryInvalidated:
			reason = p.Reason
		default:
			reason = "?"
		}
		out = append(out, fmt.Sprintf("%s: %s", e.Type, reason))
	}
	return out
}

func remember(t *testing.T, ns *memory.Namespace, key string, turn memory.Turn) []memory.Decision {
	t.Helper()
	ds, err := ns.Remember(wctx(t), key, turn, memory.RememberOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestRememberWithModel(t *testing.T) {
	model := &phased{}
	f := newWriteFixture(t, model)
	ns := f.ns(t, "user:alice")
	src := messages.MemorySource{Kind: "session", ID: "s-1", Seq: 4}
	turn := userTurn("I live in Paris.")
	turn.Source = src

	// ADD: the namespace is empty, so the fact needs no decision.
	calls := model.next(t, `{"facts": [{"content": "User lives in Paris", "importance": 0.8}]}`)
	ds := remember(t, ns, "k1", turn)
	if len(ds) != 1 || ds[0].Event != "ADD" || ds[0].MemoryID != "m_1" || calls.calls.Load() != 1 {
		t.Fatalf("ADD: %+v, %d calls", ds, calls.calls.Load())
	}
	if req := calls.last.Load(); req.Key != "k1/extract" || req.Step != 1 {
		t.Fatalf("extraction request key %q step %d", req.Key, req.Step)
	}
	paris, _ := ns.Get("m_1")
	if paris.Importance != 0.8 || paris.Tier != memory.Semantic || len(paris.Sources) != 1 || paris.Sources[0].ID != src.ID || paris.Sources[0].Seq != src.Seq {
		t.Fatalf("added %+v", paris)
	}

	// NONE: an exact duplicate is dropped by its hash, without a decision call.
	calls = model.next(t, `{"facts": ["user lives in   PARIS"]}`)
	ds = remember(t, ns, "k2", turn)
	if len(ds) != 1 || ds[0].Event != "NONE" || ds[0].TargetID != "m_1" || calls.calls.Load() != 1 {
		t.Fatalf("NONE: %+v, %d calls", ds, calls.calls.Load())
	}

	// UPDATE: the model merges the fact into the memory it was shown as "0".
	calls = model.next(t, `{"facts": ["User lives in Paris, in the 11th arrondissement"]}`,
		`{"event": "UPDATE", "id": "0", "text": "User lives in Paris (11th arrondissement)", "reason": "more precise"}`)
	ds = remember(t, ns, "k3", turn)
	if len(ds) != 1 || ds[0].Event != "UPDATE" || ds[0].TargetID != "m_1" || ds[0].MemoryID != "m_1" || calls.calls.Load() != 2 {
		t.Fatalf("UPDATE: %+v, %d calls", ds, calls.calls.Load())
	}
	if req := calls.last.Load(); req.Key != "k3/decide/0" || req.Step != 2 {
		t.Fatalf("decision request key %q step %d", req.Key, req.Step)
	}
	if m, _ := ns.Get("m_1"); m.Content != "User lives in Paris (11th arrondissement)" {
		t.Fatalf("updated: %+v", m)
	}

	// An UPDATE that changes nothing is NONE, and writes nothing.
	model.next(t, `{"facts": ["User lives in the 11th arrondissement of Paris"]}`,
		`{"event": "UPDATE", "id": "0", "text": "User lives in Paris (11th  arrondissement)"}`)
	if ds = remember(t, ns, "k3b", turn); len(ds) != 1 || ds[0].Event != "NONE" || ds[0].MemoryID != "" {
		t.Fatalf("empty UPDATE: %+v", ds)
	}

	// DELETE: the new fact is added and the old memory invalidated by it.
	calls = model.next(t, `{"facts": ["User moved to Berlin"]}`, `{"event": "DELETE", "id": "0", "reason": "moved away"}`)
	ds = remember(t, ns, "k4", turn)
	if len(ds) != 1 || ds[0].Event != "DELETE" || ds[0].TargetID != "m_1" || ds[0].MemoryID != "m_2" {
		t.Fatalf("DELETE: %+v", ds)
	}
	if m, _ := ns.Get("m_1"); m.InvalidAt == nil || m.InvalidBy != "m_2" {
		t.Fatalf("old memory not invalidated: %+v", m)
	}
	history, err := ns.History(wctx(t), "m_1")
	if err != nil {
		t.Fatal(err)
	}
	last := history[len(history)-1]
	if last.Type != messages.TypeMemoryInvalidated || last.Reason != "mem0 DELETE: contradicted by m_2: moved away" ||
		len(last.Related) != 1 || last.Related[0] != "m_2" {
		t.Fatalf("history of the invalidated memory ends with %+v", last)
	}

	// A retried Remember changes nothing twice.
	before := len(f.reasons(t, "user:alice"))
	model.next(t, `{"facts": ["User moved to Berlin"]}`, `{"event": "DELETE", "id": "0", "reason": "moved away"}`)
	ds = remember(t, ns, "k4", turn)
	if after := len(f.reasons(t, "user:alice")); after != before {
		t.Fatalf("the retry wrote %d events: %+v", after-before, ds)
	}

	// A decision naming a memory the model was not shown becomes ADD.
	model.next(t, `{"facts": ["User works at Acme in Berlin"]}`, `{"event": "UPDATE", "id": "m_77", "text": "x"}`)
	ds = remember(t, ns, "k5", turn)
	if len(ds) != 1 || ds[0].Event != "ADD" || !strings.Contains(ds[0].Reason, "not shown") || ds[0].MemoryID != "m_3" {
		t.Fatalf("unknown id: %+v", ds)
	}

	want := []string{
		"memory.added: mem0 ADD: new fact: no similar memory",
		"memory.updated: mem0 UPDATE: more precise",
		"memory.added: mem0 DELETE: replaces m_1: moved away",
		"memory.invalidated: mem0 DELETE: contradicted by m_2: moved away",
		`memory.added: mem0 ADD: the model answered UPDATE naming memory "m_77", which it was not shown`,
	}
	if got := f.reasons(t, "user:alice"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRememberOffline(t *testing.T) {
	f := newWriteFixture(t, nil)
	ns := f.ns(t, "user:bob")
	ds := remember(t, ns, "a", userTurn("Hi! I live in Paris. I like cheese. What time is it?"))
	if len(ds) != 2 || ds[0].Event != "ADD" || ds[1].Event != "ADD" {
		t.Fatalf("first turn: %+v", ds)
	}
	ds = remember(t, ns, "b", userTurn("I like cheese. I like cheese."))
	if len(ds) != 1 || ds[0].Event != "NONE" || ds[0].TargetID != "m_2" {
		t.Fatalf("repeats: %+v", ds)
	}
	ds = remember(t, ns, "c", userTurn("I like cheese and aged comté above all."))
	if len(ds) != 1 || ds[0].Event != "UPDATE" || ds[0].TargetID != "m_2" {
		t.Fatalf("richer: %+v", ds)
	}
	ds = remember(t, ns, "d", userTurn("I no longer live in Paris."))
	if len(ds) != 1 || ds[0].Event != "DELETE" || ds[0].TargetID != "m_1" || ds[0].MemoryID != "m_3" {
		t.Fatalf("negation: %+v", ds)
	}
	if m, _ := ns.Get("m_1"); m.InvalidBy != "m_3" {
		t.Fatalf("not invalidated: %+v", m)
	}
	results, err := ns.Search(wctx(t), memory.Query{Text: "where does Bob live"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Memory.ID == "m_1" {
			t.Fatalf("an invalidated memory is still found: %+v", results)
		}
	}
}

func TestRememberRefusesBadOptions(t *testing.T) {
	ns := newWriteFixture(t, nil).ns(t, "user:carol")
	for _, opts := range []memory.RememberOptions{{Tier: "core"}, {Neighbours: -1}, {Neighbours: 500}, {Metadata: []byte(`[1]`)}} {
		if _, err := ns.Remember(wctx(t), "k", userTurn("I live in Rome."), opts); !isInvalid(err) {
			t.Errorf("%+v: err = %v, want ErrInvalid", opts, err)
		}
	}
	if len(ns.Snapshot()) != 0 {
		t.Fatal("a refused Remember wrote")
	}
}

func isInvalid(err error) bool { return errors.Is(err, memory.ErrInvalid) }

// failing fails every call after the first n.
type failing struct {
	llm.Model
	n     int64
	calls atomic.Int64
}

func (f *failing) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if f.calls.Add(1) > f.n {
		return llm.Response{}, fmt.Errorf("%w: overloaded", llm.ErrTransient)
	}
	return f.Model.Generate(ctx, req)
}

func TestRememberRetryCompletesWhatFailed(t *testing.T) {
	model := &phased{}
	f := newWriteFixture(t, model)
	ns := f.ns(t, "user:dan")
	model.next(t, `{"facts": ["Dan plays the cello"]}`)
	remember(t, ns, "seed", userTurn("I play the cello."))

	// The extraction and the first decision answer, the second decision fails: the
	// first fact is applied, the second is not.
	const facts = `{"facts": ["Dan owns a red bicycle", "Dan plays the cello in an orchestra"]}`
	const first = `{"event": "ADD", "reason": "a new possession"}`
	const second = `{"event": "UPDATE", "id": "m_1", "text": "Dan plays the cello in an orchestra"}`
	turn := userTurn("I have a red bicycle and I play the cello in an orchestra.")
	model.set(&failing{Model: script(t, facts, first, second), n: 2})
	ds, err := ns.Remember(wctx(t), "turn-2", turn, memory.RememberOptions{})
	if !errors.Is(err, llm.ErrTransient) || len(ds) != 1 || ds[0].Event != "ADD" || ds[0].MemoryID != "m_2" {
		t.Fatalf("err = %v, decisions %+v", err, ds)
	}
	mid := len(f.reasons(t, "user:dan"))

	// The retry with the same key adds nothing twice and completes the rest.
	model.next(t, facts, first, second)
	ds, err = ns.Remember(wctx(t), "turn-2", turn, memory.RememberOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Event != "NONE" || ds[0].TargetID != "m_2" || ds[1].Event != "UPDATE" || ds[1].TargetID != "m_1" {
		t.Fatalf("retry: %+v", ds)
	}
	if got := f.reasons(t, "user:dan"); len(got) != mid+1 || got[mid] != "memory.updated: mem0 UPDATE: a richer version" {
		t.Fatalf("the retry wrote %v, want one update", got[mid:])
	}
	if n := len(ns.Snapshot()); n != 2 {
		t.Fatalf("%d memories, want 2", n)
	}
}
