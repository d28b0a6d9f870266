package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/vectorstore"
)

var allActions = []string{"add", "search", "summary", "stats", "update", "remove", "forget", "consolidate", "clear_all",
	"core_memory_append", "core_memory_replace", "recall"}

func memoryTool(t *testing.T, f *writeFixture) *tools.Toolbox {
	t.Helper()
	box, err := f.mem.Toolbox(memory.ToolConfig{Namespace: "agent:planner", Namespaces: []string{"user:alice"}})
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// call calls the tool with {"op": op, "args": args} under key and decodes its result
// into out (when not nil).
func call(t *testing.T, box tools.Tool, key, op, args string, out any) error {
	t.Helper()
	res, err := box.Call(wctx(t), tools.Call{Key: key, Arguments: `{"op": "` + op + `", "args": ` + args + `}`})
	if err == nil && out != nil {
		if err := json.Unmarshal([]byte(res), out); err != nil {
			t.Fatalf("%s result %q: %v", op, res, err)
		}
	}
	return err
}

func TestToolSchemas(t *testing.T) {
	f := newWriteFixture(t, nil)
	box := memoryTool(t, f)
	if got := box.Ops(); !slices.Equal(got, allActions) {
		t.Fatalf("actions %v, want %v", got, allActions)
	}
	spec := box.Spec()
	if spec.Name != "memory" || !strings.Contains(string(spec.Parameters), `"enum":["add","search"`) {
		t.Fatalf("collapsed spec %s %s", spec.Name, spec.Parameters)
	}
	expanded, err := f.mem.Tools(memory.ToolConfig{Namespace: "agent:planner", Namespaces: []string{"user:alice"}, Expand: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(expanded) != len(allActions) {
		t.Fatalf("%d expanded tools", len(expanded))
	}
	if _, err := tools.NewRegistry(expanded...); err != nil {
		t.Fatalf("the expanded tools do not make a registry: %v", err)
	}
	for i, tool := range expanded {
		s := tool.Spec()
		if s.Name != "memory_"+allActions[i] {
			t.Errorf("tool %d is %s", i, s.Name)
		}
		var schema struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(s.Parameters, &schema); err != nil {
			t.Fatal(err)
		}
		if ns, ok := schema.Properties["namespace"]; ok && !slices.Equal(ns.Enum, []string{"agent:planner", "user:alice"}) {
			t.Errorf("%s: namespace enum %v", s.Name, ns.Enum)
		}
	}
	for _, bad := range []memory.ToolConfig{{}, {Namespace: "user alice"}, {Namespace: "a:b", Namespaces: []string{"x/y"}},
		{Namespace: "a:b", Name: "memory tool"}, {Namespace: "a:b", Name: strings.Repeat("m", 50)}} {
		if _, err := f.mem.Toolbox(bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestToolRefusesBadArguments(t *testing.T) {
	f := newWriteFixture(t, nil)
	box := memoryTool(t, f)
	for _, tc := range []struct{ op, args, want string }{
		{"add", `{"content": ""}`, "content"},
		{"add", `{"content": "   "}`, "empty content"},
		{"add", `{"content": "x", "importance": 1.5}`, "importance"},
		{"add", `{"content": "x", "importance": -0.1}`, "importance"},
		{"add", `{"content": "x", "tier": "core"}`, "tier"},
		{"add", `{"content": "x", "modality": "smell"}`, "modality"},
		{"add", `{"content": "x", "modality": "image"}`, "perceptual tier only"},
		{"add", `{"content": "x", "timestamp": "yesterday"}`, "RFC 3339"},
		{"add", `{"content": "x", "namespace": "user:bob"}`, "user:bob"},
		{"add", `{"content": "x", "colour": "red"}`, "colour"},
		{"add", `{"content": "\u007fELF\u0002\u0001\u0000\u0000"}`, "content holds a NUL byte (at byte 6)"},
		{"update", `{"id": "m_404", "content": "a\u0000b"}`, "NUL byte"},
		{"core_memory_append", `{"label": "human", "content": "a\u0000b"}`, "NUL byte"},
		{"fly", `{}`, "op"},
		{"search", `{"query": "x", "limit": 0}`, "limit"},
		{"search", `{"query": "x", "limit": 101}`, "limit"},
		{"search", `{"query": "x", "tiers": ["archive"]}`, "tiers"},
		{"search", `{"query": "x", "mode": "psychic"}`, "mode"},
		{"search", `{"query": ""}`, "query"},
		{"update", `{"id": "m_404", "content": "new"}`, "no such memory"},
		{"update", `{"id": "m_404", "content": " "}`, "empty content"},
		{"remove", `{"id": "m_404"}`, "no such memory"},
		{"forget", `{"reason": "tidy"}`, "say which memories"},
		{"forget", `{"ids": ["m_404"], "reason": "tidy"}`, "m_404"},
		{"forget", `{"ids": ["m_1"]}`, "reason"},
		{"forget", `{"ids": ["m_1"], "max_importance": 0.2, "reason": "tidy"}`, "not both"},
		{"clear_all", `{"confirm": false}`, "confirm must be true to clear every memory of agent:planner"},
		{"clear_all", `{"tier": "working", "confirm": false}`, "confirm must be true to clear the working memories of agent:planner"},
		{"core_memory_append", `{"label": "human", "content": ""}`, "content"},
		{"core_memory_append", `{"label": "bad label!", "content": "x"}`, "label"},
		{"core_memory_append", `{"label": "human", "content": "` + strings.Repeat("é", 2001) + `"}`, "its limit is 2000"},
		{"core_memory_replace", `{"label": "human", "old_content": "absent", "new_content": "x"}`, "does not contain"},
		{"core_memory_replace", `{"label": "nosuch", "old_content": "a", "new_content": "x"}`, "no core block"},
		{"recall", `{"limit": 1000}`, "limit"},
		{"recall", `{"since": "2026-13-01"}`, "RFC 3339"},
	} {
		err := call(t, box, "k-"+tc.op, tc.op, tc.args, nil)
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want an invalid-arguments error about %q", tc.op, tc.args, err, tc.want)
		}
	}
	for _, ns := range []string{"agent:planner", "user:alice"} {
		if events, err := f.log.Read(wctx(t), memory.Stream(ns), 1); err != nil || len(events) != 0 {
			t.Fatalf("%s: refused calls wrote %d events (%v)", ns, len(events), err)
		}
	}
}

func TestToolActions(t *testing.T) {
	var consolidated []string
	f := newWriteFixture(t, nil, func(c *memory.Config) {
		c.Consolidate = func(_ context.Context, ns *memory.Namespace, key string) (string, error) {
			consolidated = append(consolidated, ns.Name()+" "+key)
			return "nothing to do", nil
		}
	})
	box := memoryTool(t, f)

	var added struct{ ID, Event string }
	if err := call(t, box, "c1", "add", `{"content": "Alice's flight to Lisbon leaves on May 3", "importance": 0.9, "metadata": {"src": "chat"}}`, &added); err != nil {
		t.Fatal(err)
	}
	if added.ID != "m_1" || added.Event != "ADD" {
		t.Fatalf("add: %+v", added)
	}
	// The same call performed twice writes once.
	if err := call(t, box, "c1", "add", `{"content": "Alice's flight to Lisbon leaves on May 3", "importance": 0.9, "metadata": {"src": "chat"}}`, &added); err != nil || added.ID != "m_1" {
		t.Fatalf("repeated add: %+v %v", added, err)
	}
	if err := call(t, box, "c2", "add", `{"content": "Alice prefers aisle seats", "namespace": "user:alice", "tier": "semantic"}`, &added); err != nil || added.ID != "m_2" {
		t.Fatalf("add to an allowed namespace: %+v %v", added, err)
	}

	var found struct {
		Namespace string
		Results   []struct {
			ID       string
			Content  string
			Score    float64
			Metadata map[string]string
		}
	}
	if err := call(t, box, "", "search", `{"query": "when is the flight to Lisbon", "limit": 5}`, &found); err != nil {
		t.Fatal(err)
	}
	if found.Namespace != "agent:planner" || len(found.Results) != 1 || found.Results[0].ID != "m_1" || found.Results[0].Metadata["src"] != "chat" {
		t.Fatalf("search: %+v", found)
	}

	var updated struct {
		ID, Content string
		Importance  float64
	}
	if err := call(t, box, "c3", "update", `{"id": "m_1", "content": "Alice's flight to Lisbon leaves on May 4", "reason": "rebooked"}`, &updated); err != nil {
		t.Fatal(err)
	}
	if updated.Content != "Alice's flight to Lisbon leaves on May 4" || updated.Importance != 0.9 {
		t.Fatalf("update: %+v", updated)
	}

	var block struct {
		Label, Value string
		Chars, Limit int
	}
	if err := call(t, box, "c4", "core_memory_append", `{"label": "human", "content": "Name: Alice"}`, &block); err != nil {
		t.Fatal(err)
	}
	if err := call(t, box, "c5", "core_memory_append", `{"label": "human", "content": "Likes: Lisbon"}`, &block); err != nil {
		t.Fatal(err)
	}
	if err := call(t, box, "c6", "core_memory_replace", `{"label": "human", "old_content": "Lisbon", "new_content": "Lisbon, Porto"}`, &block); err != nil {
		t.Fatal(err)
	}
	if block.Label != "human" || block.Value != "Name: Alice\nLikes: Lisbon, Porto" || block.Chars != len(block.Value) || block.Limit == 0 {
		t.Fatalf("block: %+v", block)
	}

	var summary struct {
		Namespace string
		Blocks    string
		Tiers     map[string]struct {
			Count int
			Top   []struct{ ID string }
		}
	}
	if err := call(t, box, "", "summary", `{}`, &summary); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary.Blocks, "Likes: Lisbon, Porto") || summary.Tiers["semantic"].Count != 1 || summary.Tiers["working"].Count != 0 {
		t.Fatalf("summary: %+v", summary)
	}

	var stats memory.Stats
	if err := call(t, box, "", "stats", `{"namespace": "user:alice"}`, &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Namespace != "user:alice" || stats.Tiers[memory.Semantic].Count != 1 {
		t.Fatalf("stats: %+v", stats)
	}

	var consolidatedOut struct{ Result string }
	if err := call(t, box, "c7", "consolidate", `{}`, &consolidatedOut); err != nil || consolidatedOut.Result != "nothing to do" ||
		len(consolidated) != 1 || consolidated[0] != "agent:planner c7" {
		t.Fatalf("consolidate: %+v %v %v", consolidatedOut, consolidated, err)
	}

	var forgotten struct{ Forgotten []string }
	if err := call(t, box, "c8", "forget", `{"max_importance": 0.5, "reason": "unimportant", "namespace": "user:alice"}`, &forgotten); err != nil ||
		len(forgotten.Forgotten) != 1 || forgotten.Forgotten[0] != "m_2" {
		t.Fatalf("forget: %+v %v", forgotten, err)
	}
	var removed struct{ Removed string }
	if err := call(t, box, "c9", "remove", `{"id": "m_1", "reason": "trip cancelled"}`, &removed); err != nil || removed.Removed != "m_1" {
		t.Fatalf("remove: %+v %v", removed, err)
	}
	ns := f.ns(t, "agent:planner")
	history, err := ns.History(wctx(t), "m_1")
	if err != nil {
		t.Fatal(err)
	}
	var why []string
	for _, c := range history {
		why = append(why, string(c.Type)+": "+c.Reason)
	}
	want := "memory.added: added by the agent|memory.updated: rebooked|memory.forgotten: trip cancelled"
	if strings.Join(why, "|") != want {
		t.Fatalf("history %q, want %q", strings.Join(why, "|"), want)
	}

	if err := call(t, box, "c10", "add", `{"content": "a working note", "tier": "working"}`, nil); err != nil {
		t.Fatal(err)
	}
	var cleared struct{ Cleared int }
	if err := call(t, box, "c11", "clear_all", `{"tier": "working", "confirm": true}`, &cleared); err != nil || cleared.Cleared != 1 {
		t.Fatalf("clear_all: %+v %v", cleared, err)
	}

	recorded(t, f.log, "s-trip", day1, &messages.TaskSubmitted{Input: "Book my flight to Lisbon"}, answer("Booked for May 3."))
	var recalled struct {
		Hits []memory.RecallHit
	}
	if err := call(t, box, "", "recall", `{"query": "Lisbon flight"}`, &recalled); err != nil {
		t.Fatal(err)
	}
	if len(recalled.Hits) != 1 || recalled.Hits[0].SessionID != "s-trip" || recalled.Hits[0].Role != "user" {
		t.Fatalf("recall: %+v", recalled)
	}
}

func TestToolConsolidateWithoutConsolidator(t *testing.T) {
	box := memoryTool(t, newWriteFixture(t, nil))
	err := call(t, box, "k", "consolidate", `{}`, nil)
	if !errors.Is(err, memory.ErrNoConsolidation) {
		t.Fatalf("err = %v, want ErrNoConsolidation", err)
	}
}

func ExampleMemories_Toolbox() {
	dir, err := os.MkdirTemp("", "memory-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer log.Close()
	store, err := vectorstore.Open(vectorstore.Config{}) // in memory
	if err != nil {
		panic(err)
	}
	defer store.Close()
	mem, err := memory.Open(memory.Config{Log: log, Vectors: store, NewID: func() string { return "m_1" }})
	if err != nil {
		panic(err)
	}
	box, err := mem.Toolbox(memory.ToolConfig{Namespace: "agent:planner"})
	if err != nil {
		panic(err)
	}
	for _, args := range []string{
		`{"op": "add", "args": {"content": "The user's flight to Lisbon leaves on May 3", "importance": 0.8}}`,
		`{"op": "add", "args": {"content": "x", "importance": 2}}`,
		`{"op": "core_memory_append", "args": {"label": "human", "content": "Name: Alice"}}`,
	} {
		out, err := box.Call(ctx, tools.Call{Key: "call-" + args[8:11], Arguments: args})
		if err != nil {
			fmt.Println("error:", errors.Is(err, tools.ErrInvalidArguments))
			continue
		}
		fmt.Println(out)
	}
	// Output:
	// {"id":"m_1","event":"ADD"}
	// error: true
	// {"label":"human","value":"Name: Alice","chars":11,"limit":2000}
}

// With WritesRefused set (a replay fork's memory), every action that writes
// answers ErrWritesRefused with why and changes nothing, the reads work, and the
// tool offers the same actions and schemas (so prompts are the same).
func TestToolWithWritesRefusedChangesNothing(t *testing.T) {
	f := newWriteFixture(t, nil)
	open := memoryTool(t, f)
	if err := call(t, open, "k0", "add", `{"content": "The user's flight leaves on May 3"}`, nil); err != nil {
		t.Fatal(err)
	}
	box, err := f.mem.Toolbox(memory.ToolConfig{Namespace: "agent:planner", Namespaces: []string{"user:alice"}, WritesRefused: "a fork"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := open.Spec(), box.Spec()
	if a.Description != b.Description || string(a.Parameters) != string(b.Parameters) {
		t.Fatal("the tool's spec differs with writes refused")
	}
	for op, args := range map[string]string{
		"add":                 `{"content": "Another fact"}`,
		"update":              `{"id": "m_1", "content": "x"}`,
		"remove":              `{"id": "m_1"}`,
		"forget":              `{"ids": ["m_1"], "reason": "x"}`,
		"consolidate":         `{}`,
		"clear_all":           `{"confirm": true}`,
		"core_memory_append":  `{"label": "human", "content": "x"}`,
		"core_memory_replace": `{"label": "human", "old_content": "x", "new_content": "y"}`,
	} {
		err := call(t, box, "k-"+op, op, args, nil)
		if !errors.Is(err, memory.ErrWritesRefused) || !strings.Contains(err.Error(), "a fork") {
			t.Errorf("%s: %v; want ErrWritesRefused", op, err)
		}
	}
	var found struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := call(t, box, "k-s", "search", `{"query": "flight"}`, &found); err != nil || len(found.Results) != 1 {
		t.Fatalf("search with writes refused: %v, %d results", err, len(found.Results))
	}
}
