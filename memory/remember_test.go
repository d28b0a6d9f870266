package memory_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
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
		"fenced with prose around": {
			answer: "Here you go:\n```json\n{\"facts\": [{\"content\": \"User is vegetarian\", \"importance\": \"0.9\"}]}\n```\nAnything else?",
			want:   []memory.Fact{{Content: "User is vegetarian", Importance: 0.9, Tier: memory.Semantic}},
		},
		"trailing text": {
			answer: `{"facts": [{"content": "User is vegetarian"}]} I hope this helps {"facts": []}`,
			want:   []memory.Fact{{Content: "User is vegetarian", Importance: 0.5, Tier: memory.Semantic}},
		},
		"strings, as Mem0 answers": {
			answer: `{"facts": ["User is vegetarian", "  ", "user   is vegetarian", "Lives in Berlin"]}`,
			want: []memory.Fact{{Content: "User is vegetarian", Importance: 0.5, Tier: memory.Semantic},
				{Content: "Lives in Berlin", Importance: 0.5, Tier: memory.Semantic}},
		},
		"bare list, clamped and defaulted": {
			answer: `[{"content": "User is vegetarian", "importance": 7, "tier": "core"}, {"content": "x", "importance": -1, "tier": "EPISODIC"}, 42]`,
			want: []memory.Fact{{Content: "User is vegetarian", Importance: 1, Tier: memory.Semantic},
				{Content: "x", Importance: 0.5, Tier: memory.Episodic}},
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
			if req == nil || len(req.Messages) != 2 || !strings.Contains(req.Messages[1].Content, "user: I moved to Berlin") ||
				!strings.Contains(req.Messages[1].Content, "assistant: Noted!") || !strings.Contains(req.Messages[0].Content, `{"facts"`) {
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
		{Content: "The project deadline is March 3.", Importance: 0.5, Tier: memory.Episodic},
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
		"update by memory id, numeric id, no text, in a fence": {
			answer: "```\n{\"event\": \"update\", \"id\": \"m_cheese\"}\n```",
			want:   memory.Decision{Event: memory.EventUpdate, TargetID: "m_cheese", Content: "I like cheddar cheese", Reason: "a richer version"},
		},
		"delete": {
			answer: `{"event": "DELETE", "id": 0, "reason": "moved"}`,
			want:   memory.Decision{Event: memory.EventDelete, TargetID: "m_paris", Content: "I like cheddar cheese", Reason: "moved"},
		},
		"none": {
			answer: `{"event": "NONE", "id": "1"}`,
			want:   memory.Decision{Event: "NONE", TargetID: "m_cheese", Content: "I like cheddar cheese", Reason: "already known"},
		},
		"add": {
			answer: `{"event": "ADD", "text": "ignored"}`,
			want:   memory.Decision{Event: "ADD", Content: "I like cheddar cheese", Reason: "new fact"},
		},
		"unknown short id becomes ADD": {
			answer: `{"event": "UPDATE", "id": "7", "text": "x"}`,
			want:   memory.Decision{Event: "ADD", Content: "I like cheddar cheese", Reason: `the model answered UPDATE naming memory "7", which it was not shown`},
		},
		"unknown memory id becomes ADD": {
			answer: `{"event": "DELETE", "id": "m_elsewhere"}`,
			want:   memory.Decision{Event: "ADD", Content: "I like cheddar cheese", Reason: `the model answered DELETE naming memory "m_elsewhere", which it was not shown`},
		},
		"update without id becomes ADD": {
			answer: `{"event": "UPDATE", "text": "x"}`,
			want:   memory.Decision{Event: "ADD", Content: "I like cheddar cheese", Reason: "the model answered UPDATE without naming a memory"},
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
			if !strings.Contains(prompt, `"id": "0"`) || !strings.Contains(prompt, "I live in Paris") ||
				!strings.HasSuffix(prompt, "New fact:\nI like cheddar cheese") || strings.Contains(prompt, "m_paris") {
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
			fact: memory.Fact{Content: "i live in  PARIS"}, neighbours: neighbours(), event: "NONE", target: "m_paris",
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
			fact: memory.Fact{Content: "I like tea"}, neighbours: neighbours(), event: "ADD",
		},
		"new": {
			fact: memory.Fact{Content: "My sister is called Ada"}, neighbours: neighbours(), event: "ADD",
		},
		"invalid neighbours are ignored": {
			fact:       memory.Fact{Content: "I live in Paris"},
			neighbours: []memory.Memory{{ID: "m_x", Content: "I live in Paris", InvalidAt: new(time.Time)}},
			event:      "ADD",
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := memory.DecideOffline(tc.fact, tc.neighbours)
			if d.Event != tc.event || d.TargetID != tc.target || d.Reason == "" {
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
