package memory_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// counted is a scripted model that counts its calls and keeps the last request.
type counted struct {
	*llm.Scripted
	calls atomic.Int64
	last  atomic.Pointer[llm.Request]
}

func (c *counted) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	c.calls.Add(1)
	c.last.Store(&req)
	return c.Scripted.Generate(ctx, req)
}

// script returns a scripted model answering the given contents, one per step.
func script(t *testing.T, answers ...string) *counted {
	t.Helper()
	s := llm.Script{Name: "scripted"}
	for _, a := range answers {
		s.Steps = append(s.Steps, llm.ScriptStep{Content: a})
	}
	m, err := llm.NewScripted(s)
	if err != nil {
		t.Fatal(err)
	}
	return &counted{Scripted: m}
}

func wctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func userTurn(texts ...string) memory.Turn {
	var turn memory.Turn
	for i, s := range texts {
		role := messages.RoleUser
		if i%2 == 1 {
			role = messages.RoleAssistant
		}
		turn.Messages = append(turn.Messages, messages.ChatMessage{Role: role, Content: s})
	}
	return turn
}

func TestExtractFactsReadsModelAnswers(t *testing.T) {
	turn := userTurn("I moved to Berlin last month and I'm vegetarian.", "Noted!")
	for name, tc := range map[string]struct {
		answer string
		want   []memory.Fact
	}{
		"plain": {
			answer: `{"facts": [{"content": "User moved to Berlin last month", "importance": 0.8, "tier": "episodic"}, {"content": "User is vegetarian", "importance": 0.9, "tier": "semantic"}]}`,
			want: []memory.Fact{{Content: "User moved to Berlin last month", Importance: 0.8, Tier: memory.Episodic},
				{Content: "User is vegetarian", Importance: 0.9, Tier: memory.Semantic}},
		},
		// A fence quoted inside a fact is not the answer's fence: the fact names the
		// fenced code and the object around it is the answer.
		"a fact quoting a fence": {
			answer: "{\"facts\": [{\"content\": \"User wants config shown as ```{\\\"port\\\": 80}``` blocks\", \"importance\": 0.7, \"tier\": \"semantic\"}]}",
			want:   []memory.Fact{{Content: "User wants config shown as ```{\"port\": 80}``` blocks", Importance: 0.7, Tier: memory.Semantic}},
		},
		"fenced with prose around": {
			answer: "Here you go:\n```json\n{\"facts\": [{\"content\": \"User is vegetarian\", \"importance\": \"0.9\"}]}\n```\nAnything else?",
			want:   []memory.Fact{{Content: "User is vegetarian", Importance: 0.9, Tier: memory.Semantic}},
		},
		"trailing text": {
			answer: `{"facts": [{"content": "User is vegetarian"}]} I hope this helps {"facts": []}`,
			want:   []memory.Fact{{Content: "User is vegetarian", Importance: memory.DefaultImportance, Tier: memory.Semantic}},
		},
		"strings, as Mem0 answers": {
			answer: `{"facts": ["User is vegetarian", "  ", "user   is vegetarian", "Lives in Berlin"]}`,
			want: []memory.Fact{{Content: "User is vegetarian", Importance: memory.DefaultImportance, Tier: memory.Semantic},
				{Content: "Lives in Berlin", Importance: memory.DefaultImportance, Tier: memory.Semantic}},
		},
		"bare list, clamped and defaulted": {
			answer: `[{"content": "User is vegetarian", "importance": 7, "tier": "core"}, {"content": "x", "importance": -1, "tier": "EPISODIC"}, 42, {"content": "y", "tier": "working"}]`,
			want: []memory.Fact{{Content: "User is vegetarian", Importance: 1, Tier: memory.Semantic},
				{Content: "x", Importance: memory.DefaultImportance, Tier: memory.Episodic},
				{Content: "y", Importance: memory.DefaultImportance, Tier: memory.Semantic}},
		},
		"nothing": {answer: `{"facts": []}`},
	} {
		t.Run(name, func(t *testing.T) {
			m := script(t, tc.answer)
			got, err := memory.ExtractFacts(wctx(t), m, turn)
			if err != nil {
				t.Fatal(err)
			}
			if !equalFacts(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			req := m.last.Load()
			if req == nil || len(req.Messages) != 2 || !strings.Contains(req.Messages[1].Content, `<turn role="user">I moved to Berlin`) ||
				!strings.Contains(req.Messages[1].Content, `<turn role="assistant">Noted!</turn>`) || !strings.Contains(req.Messages[0].Content, `{"facts"`) {
				t.Fatalf("prompt: %+v", req)
			}
		})
	}
}

func equalFacts(a, b []memory.Fact) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Content != b[i].Content || a[i].Importance != b[i].Importance || a[i].Tier != b[i].Tier {
			return false
		}
	}
	return true
}

func TestExtractFactsRefusesGarbage(t *testing.T) {
	for _, answer := range []string{
		"I could not find any facts.",
		`{"facts": [{"content": "unterminated`,
		`{"memories": ["User is vegetarian"]}`,
		`{"facts": "User is vegetarian"}`,
		"```json\n{facts: []}\n```",
	} {
		_, err := memory.ExtractFacts(wctx(t), script(t, answer), userTurn("I am vegetarian."))
		if !errors.Is(err, memory.ErrModelOutput) {
			t.Errorf("%q: err = %v, want ErrModelOutput", answer, err)
		}
	}
}

func TestExtractFactsSkipsTheModelForAnEmptyTurn(t *testing.T) {
	m := script(t, `{"facts": ["x"]}`)
	turn := memory.Turn{Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "You are helpful."}, {Role: messages.RoleUser, Content: "  "}}}
	facts, err := memory.ExtractFacts(wctx(t), m, turn)
	if err != nil || len(facts) != 0 || m.calls.Load() != 0 {
		t.Fatalf("facts %v, err %v, %d calls", facts, err, m.calls.Load())
	}
}

func TestExtractFactsOffline(t *testing.T) {
	turn := memory.Turn{Messages: []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: "I am a system prompt and no fact."},
		{Role: messages.RoleUser, Content: "Hi there! Thanks a lot. My name is Alice and I live in Paris. " +
			"What is the weather like? Can you book a table? Please book a table for two.\n" +
			"Remember that I am allergic to peanuts. Yesterday I met Bob at the station. The project deadline is March 3. " +
			"My last name is Martin. We went to Rome last summer."},
		{Role: messages.RoleAssistant, Content: "Paris is lovely in spring."},
		{Role: messages.RoleUser, Content: "ok. Sounds good! my name is alice and i live in paris."},
	}}
	got := memory.ExtractFactsOffline(turn)
	want := []memory.Fact{
		{Content: "My name is Alice and I live in Paris.", Importance: 0.7, Tier: memory.Semantic},
		{Content: "I am allergic to peanuts.", Importance: 0.7, Tier: memory.Semantic},
		{Content: "Yesterday I met Bob at the station.", Importance: 0.7, Tier: memory.Episodic},
		{Content: "The project deadline is March 3.", Importance: memory.DefaultImportance, Tier: memory.Episodic},
		{Content: "My last name is Martin.", Importance: 0.7, Tier: memory.Semantic},
		{Content: "We went to Rome last summer.", Importance: 0.7, Tier: memory.Episodic},
	}
	if !equalFacts(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	facts, err := memory.ExtractFacts(wctx(t), nil, turn)
	if err != nil || !equalFacts(facts, want) {
		t.Fatalf("ExtractFacts without a model: %+v, %v", facts, err)
	}
}

func neighbours() []memory.Memory {
	return []memory.Memory{
		{ID: "m_paris", Content: "I live in Paris", Tier: memory.Semantic},
		{ID: "m_cheese", Content: "I like cheese", Tier: memory.Semantic},
	}
}

func TestDecideFactWithModel(t *testing.T) {
	fact := memory.Fact{Content: "I like cheddar cheese", Importance: 0.6, Tier: memory.Semantic}
	for name, tc := range map[string]struct {
		answer string
		want   memory.Decision
	}{
		"update by short id": {
			answer: `{"event": "UPDATE", "id": "1", "text": "Likes cheese, cheddar above all", "reason": "more precise"}`,
			want:   memory.Decision{Event: memory.EventUpdate, TargetID: "m_cheese", Content: "Likes cheese, cheddar above all", Reason: "more precise"},
		},
		"update whose text quotes a fence": {
			answer: "{\"event\": \"UPDATE\", \"id\": \"1\", \"text\": \"Likes cheese; wants recipes as ```[steps]``` lists\", \"reason\": \"more precise\"}",
			want:   memory.Decision{Event: memory.EventUpdate, TargetID: "m_cheese", Content: "Likes cheese; wants recipes as ```[steps]``` lists", Reason: "more precise"},
		},
		"update by memory id, numeric id, no text, in a fence": {
			answer: "```\n{\"event\": \"update\", \"id\": \"m_cheese\"}\n```",
			want:   memory.Decision{Event: memory.EventUpdate, TargetID: "m_cheese", Content: "I like cheddar cheese", Reason: "a richer version"},
		},
		"update whose text shows nothing keeps the fact's": {
			answer: `{"event": "UPDATE", "id": "1", "text": "\u200b\ufeff"}`,
			want:   memory.Decision{Event: memory.EventUpdate, TargetID: "m_cheese", Content: "I like cheddar cheese", Reason: "a richer version"},
		},
		"delete": {
			answer: `{"event": "DELETE", "id": 0, "reason": "moved"}`,
			want:   memory.Decision{Event: memory.EventDelete, TargetID: "m_paris", Content: "I like cheddar cheese", Reason: "moved"},
		},
		"none": {
			answer: `{"event": "NONE", "id": "1"}`,
			want:   memory.Decision{Event: memory.EventNone, TargetID: "m_cheese", Content: "I like cheddar cheese", Reason: "already known"},
		},
		"add": {
			answer: `{"event": "ADD", "text": "ignored"}`,
			want:   memory.Decision{Event: memory.EventAdd, Content: "I like cheddar cheese", Reason: "new fact"},
		},
		"unknown short id becomes ADD": {
			answer: `{"event": "UPDATE", "id": "7", "text": "x"}`,
			want:   memory.Decision{Event: memory.EventAdd, Content: "I like cheddar cheese", Reason: `the model answered UPDATE naming memory "7", which it was not shown`},
		},
		"unknown memory id becomes ADD": {
			answer: `{"event": "DELETE", "id": "m_elsewhere"}`,
			want:   memory.Decision{Event: memory.EventAdd, Content: "I like cheddar cheese", Reason: `the model answered DELETE naming memory "m_elsewhere", which it was not shown`},
		},
		"update without id becomes ADD": {
			answer: `{"event": "UPDATE", "text": "x"}`,
			want:   memory.Decision{Event: memory.EventAdd, Content: "I like cheddar cheese", Reason: "the model answered UPDATE without naming a memory"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := script(t, tc.answer)
			got, err := memory.DecideFact(wctx(t), m, fact, neighbours())
			if err != nil {
				t.Fatal(err)
			}
			if got.Fact.Content != fact.Content {
				t.Fatalf("fact %+v", got.Fact)
			}
			got.Fact = memory.Fact{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			prompt := m.last.Load().Messages[1].Content
			if system := m.last.Load().Messages[0].Content; !strings.Contains(system, `"reason": "<a few words why>"`) {
				t.Fatalf("system prompt:\n%s", system)
			}
			if !strings.Contains(prompt, `<memory id="0">I live in Paris</memory>`) ||
				!strings.HasSuffix(prompt, "New fact:\n<fact>I like cheddar cheese</fact>\n") || strings.Contains(prompt, "m_paris") {
				t.Fatalf("prompt:\n%s", prompt)
			}
		})
	}
}

func TestDecideFactRefusesGarbage(t *testing.T) {
	fact := memory.Fact{Content: "I like cheddar cheese"}
	for _, answer := range []string{"UPDATE 1", `{"event": "MERGE", "id": "1"}`, `{"event": "ADD"`, `[]`} {
		if _, err := memory.DecideFact(wctx(t), script(t, answer), fact, neighbours()); !errors.Is(err, memory.ErrModelOutput) {
			t.Errorf("%q: err = %v, want ErrModelOutput", answer, err)
		}
	}
}

func TestDecideFactWithoutNeighboursAddsWithoutAModelCall(t *testing.T) {
	m := script(t, `{"event": "NONE", "id": "0"}`)
	invalid := time.Unix(1, 0)
	d, err := memory.DecideFact(wctx(t), m, memory.Fact{Content: "I like tea"},
		[]memory.Memory{{ID: "m_old", Content: "I like tea", InvalidAt: &invalid}})
	if err != nil || d.Event != "ADD" || m.calls.Load() != 0 {
		t.Fatalf("decision %+v, err %v, %d calls", d, err, m.calls.Load())
	}
}

func TestDecideOffline(t *testing.T) {
	v := func(xs ...float32) []float32 { return xs }
	for name, tc := range map[string]struct {
		fact       memory.Fact
		neighbours []memory.Memory
		event      string
		target     string
	}{
		"exact duplicate, another case": {
			fact: memory.Fact{Content: "i live in  PARIS"}, neighbours: neighbours(), event: memory.EventNone, target: "m_paris",
		},
		"near duplicate by vector": {
			fact:       memory.Fact{Content: "I reside in Paris", Vector: v(1, 0.1, 0)},
			neighbours: []memory.Memory{{ID: "m_a", Content: "unrelated words", Vector: v(0, 1, 0)}, {ID: "m_b", Content: "I live in Paris", Vector: v(1, 0.12, 0)}},
			event:      "NONE", target: "m_b",
		},
		"negation contradicts": {
			fact: memory.Fact{Content: "I no longer live in Paris"}, neighbours: neighbours(), event: memory.EventDelete, target: "m_paris",
		},
		"richer version": {
			fact: memory.Fact{Content: "I like cheese, aged comté above all"}, neighbours: neighbours(), event: memory.EventUpdate, target: "m_cheese",
		},
		"words of another, in another order": {
			fact: memory.Fact{Content: "Paris, where I live, is lovely"}, neighbours: neighbours(), event: memory.EventUpdate, target: "m_paris",
		},
		"a single-valued relation to another object": {
			fact: memory.Fact{Content: "I live in Berlin"}, neighbours: neighbours(), event: memory.EventDelete, target: "m_paris",
		},
		"a relation of a stored memory": {
			fact:       memory.Fact{Content: "Alice works at Initech"},
			neighbours: []memory.Memory{{ID: "m_job", Content: "her job", Relations: []messages.MemoryRelation{{From: "alice", Type: "works_at", To: "acme"}}}},
			event:      memory.EventDelete, target: "m_job",
		},
		"a relation that takes many objects": {
			fact: memory.Fact{Content: "I like tea"}, neighbours: neighbours(), event: memory.EventAdd,
		},
		"new": {
			fact: memory.Fact{Content: "My sister is called Ada"}, neighbours: neighbours(), event: memory.EventAdd,
		},
		"invalid neighbours are ignored": {
			fact:       memory.Fact{Content: "I live in Paris"},
			neighbours: []memory.Memory{{ID: "m_x", Content: "I live in Paris", InvalidAt: new(time.Time)}},
			event:      "ADD",
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := memory.DecideOffline(tc.fact, tc.neighbours)
			if d.Event != tc.event || d.TargetID != tc.target || d.Reason == "" || strings.Contains(d.Reason, "Cosine") {
				t.Fatalf("got %+v, want %s %q", d, tc.event, tc.target)
			}
			if d.Event != "NONE" && d.Content != strings.Join(strings.Fields(tc.fact.Content), " ") {
				t.Fatalf("content %q", d.Content)
			}
		})
	}
}

func ExampleDecideOffline() {
	stored := []memory.Memory{
		{ID: "m_1", Content: "I live in Paris"},
		{ID: "m_2", Content: "I like cheese"},
	}
	for _, fact := range []string{"i live in paris", "I like cheese, aged comté above all", "I live in Berlin", "My sister is called Ada"} {
		d := memory.DecideOffline(memory.Fact{Content: fact}, stored)
		fmt.Printf("%-6s %-3s %s\n", d.Event, d.TargetID, d.Reason)
	}
	// Output:
	// NONE   m_1 same content as m_1
	// UPDATE m_2 richer version of m_2
	// DELETE m_1 user lives_in berlin contradicts user lives_in paris of m_1
	// ADD        new fact
}

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

func TestRememberOptions(t *testing.T) {
	f := newWriteFixture(t, nil)
	ns := f.ns(t, "user:erin")
	turn := userTurn("I have two cats.")
	turn.Source = messages.MemorySource{Kind: "session", ID: "s-9", Seq: 2}
	ds, err := ns.Remember(wctx(t), "k", turn, memory.RememberOptions{Tier: memory.Working, Metadata: []byte(`{"from": "chat"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Event != memory.EventAdd {
		t.Fatalf("decisions %+v", ds)
	}
	m, ok := ns.Get(ds[0].MemoryID)
	if !ok || m.Tier != memory.Working || string(m.Metadata) != `{"from":"chat"}` || len(m.Sources) != 1 || m.Sources[0].ID != "s-9" {
		t.Fatalf("memory %+v", m)
	}
}

// A turn holding bytes no memory takes (a NUL, invalid UTF-8: a task's input is
// whatever its caller sent) is remembered without them, rather than failing the
// write after the task at its first such fact.
func TestRememberDropsTheBytesNoMemoryTakes(t *testing.T) {
	ns := newWriteFixture(t, nil).ns(t, "user:bob")
	ds := remember(t, ns, "a", userTurn("I live in Par\x00is.\nMy sister is called Ann\xffa. I like green tea."))
	if len(ds) != 3 {
		t.Fatalf("decisions %+v, want 3", ds)
	}
	want := []string{"I live in Paris.", "My sister is called Ann\uFFFDa.", "I like green tea."}
	for i, d := range ds {
		if d.Event != memory.EventAdd {
			t.Fatalf("fact %d: %+v, want ADD", i, d)
		}
		m, ok := ns.Get(d.MemoryID)
		if !ok || m.Content != want[i] {
			t.Errorf("fact %d stored %q, want %q", i, m.Content, want[i])
		}
	}

	// With a model: its facts and its decided text are cleaned too.
	model := &phased{}
	f := newWriteFixture(t, model)
	ns = f.ns(t, "user:dan")
	model.next(t, `{"facts": ["Dan plays the cello"]}`)
	remember(t, ns, "seed", userTurn("I play the cello."))
	model.next(t, `{"facts": ["Dan owns a \u0000red bicycle", "Dan plays the cello in an orchestra"]}`,
		`{"event": "ADD", "reason": "a new possession"}`,
		`{"event": "UPDATE", "id": "m_1", "text": "Dan plays the cello\u0000 in an orchestra"}`)
	ds = remember(t, ns, "turn-2", userTurn("I have a red bicycle and I play the cello in an orchestra."))
	if len(ds) != 2 || ds[0].Event != memory.EventAdd || ds[1].Event != memory.EventUpdate {
		t.Fatalf("decisions %+v", ds)
	}
	for id, want := range map[string]string{ds[0].MemoryID: "Dan owns a red bicycle", "m_1": "Dan plays the cello in an orchestra"} {
		if m, _ := ns.Get(id); m.Content != want {
			t.Errorf("%s holds %q, want %q", id, m.Content, want)
		}
	}
}
