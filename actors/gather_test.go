package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// ragStub is a rag tool answering every search with hits in the rag tool's JSON
// form (node.KBHitsJSON), or failing with fail; it counts its calls and keeps the
// arguments of the last.
type ragStub struct {
	hits  []knowledge.Hit
	fail  string
	calls atomic.Int32
	args  atomic.Value
}

func (r *ragStub) tool() funcTool {
	return funcTool{"rag", func(_ context.Context, c tools.Call) (string, error) {
		r.calls.Add(1)
		r.args.Store(c.Arguments)
		if r.fail != "" {
			return "", errors.New(r.fail)
		}
		var a struct {
			Op   string `json:"op"`
			Args struct {
				KB, Query, Format string
				Limit             int
			} `json:"args"`
		}
		if err := json.Unmarshal([]byte(c.Arguments), &a); err != nil || a.Op != "search" || a.Args.Format != "json" {
			return "", fmt.Errorf("not a search in JSON: %s", c.Arguments)
		}
		b, _ := json.Marshal(struct {
			KB    string          `json:"kb"`
			Query string          `json:"query"`
			Hits  []knowledge.Hit `json:"hits"`
		}{a.Args.KB, a.Args.Query, r.hits[:min(len(r.hits), a.Args.Limit)]})
		return string(b), nil
	}}
}

// guideHits are four chunks of a guide, best first.
var guideHits = []knowledge.Hit{
	{ChunkID: "c1", Source: "guide.md", HeadingPath: "# Guide > ## Install", Content: "Run troupe init to create the data directory.", Score: 0.8},
	{ChunkID: "c2", Source: "guide.md", HeadingPath: "# Guide > ## Configure", Content: "The node reads troupe.json from the working directory.", Score: 0.6},
	{ChunkID: "c3", Source: "faq.md", Content: "Troupe runs on Linux and macOS.", Score: 0.4},
	{ChunkID: "c4", Source: "faq.md", HeadingPath: "# FAQ > ## Licence", Content: "Troupe is licensed under Apache 2.0.", Score: 0.2},
}

// gatherAgent configures the harness's agent to gather evidence from the rag
// tool's base docs, and returns a pointer to the agent it runs.
func gatherAgent(o actors.ContextOptions, src actors.ContextSources) (func(*actors.SessionDeps), *actors.Agent) {
	agent := new(actors.Agent)
	return func(d *actors.SessionDeps) {
		d.Agent.Context, d.Agent.Sources = o, src
		*agent = d.Agent
	}, agent
}

// kept returns the report's kept items' IDs of kind.
func keptOf(r *messages.ContextReport, kind string) []string {
	var out []string
	for _, it := range r.Kept {
		if it.Kind == kind {
			out = append(out, it.ID)
		}
	}
	return out
}

// modelRequests returns the session's recorded ModelRequested events.
func modelRequests(t *testing.T, events []messages.Envelope) []*messages.ModelRequested {
	t.Helper()
	var out []*messages.ModelRequested
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			out = append(out, decode[*messages.ModelRequested](t, e))
		}
	}
	return out
}

// toolRequests returns the session's recorded ToolCallRequested events.
func toolRequests(t *testing.T, events []messages.Envelope) []*messages.ToolCallRequested {
	t.Helper()
	var out []*messages.ToolCallRequested
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			out = append(out, decode[*messages.ToolCallRequested](t, e))
		}
	}
	return out
}

// An agent with a knowledge base gathers evidence before its first model call:
// one search with the task's input on its base, recorded with its purpose, whose
// chunks reach the model in the Evidence section with their citation labels,
// outside the conversation, and are listed kept in the report. It is no step,
// and replay verify finds the session deterministic.
func TestGatheredEvidenceReachesTheModelWithCitations(t *testing.T) {
	rag := &ragStub{hits: guideHits}
	model := &recordingModel{Model: script(t, text("Run troupe init [guide.md > # Guide > ## Install]."))}
	deps, agent := gatherAgent(actors.ContextOptions{Evidence: 3}, actors.ContextSources{KnowledgeTool: "rag", KnowledgeBase: "docs"})
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{rag.tool()}, deps: deps})
	h.submit("g", "task-g", "How do I install troupe?")
	events := h.wait("g")
	assertGapFree(t, events)
	done := completion(t, events)
	if done.Steps != 1 {
		t.Fatalf("steps: %d, want 1 (the retrieval is no step)", done.Steps)
	}
	calls := toolRequests(t, events)
	if len(calls) != 1 || calls[0].Purpose != actors.PurposeEvidence || calls[0].Tool != "rag" ||
		calls[0].Arguments != `{"op":"search","args":{"kb":"docs","query":"How do I install troupe?","limit":3,"format":"json"}}` {
		t.Fatalf("the retrieval: %+v", calls)
	}
	if !slices.ContainsFunc(events, func(e messages.Envelope) bool { return e.Type == messages.TypeToolCallCompleted }) ||
		slices.IndexFunc(events, func(e messages.Envelope) bool { return e.Type == messages.TypeToolCallCompleted }) >
			slices.IndexFunc(events, func(e messages.Envelope) bool { return e.Type == messages.TypeModelRequested }) {
		t.Fatalf("the retrieval is not answered before the model call: %s", types(events))
	}
	req := model.requests("")[0]
	for _, m := range req.Messages {
		if m.Role == messages.RoleTool || len(m.ToolCalls) > 0 {
			t.Fatalf("the retrieval entered the conversation: %+v", req.Messages)
		}
	}
	last := req.Messages[len(req.Messages)-1].Content
	for _, want := range []string{"<evidence>", "[guide.md > # Guide > ## Install]\nRun troupe init", "[guide.md > # Guide > ## Configure]", "[faq.md]\nTroupe runs on Linux", "</evidence>"} {
		if !strings.Contains(last, want) {
			t.Fatalf("the request's briefing lacks %q:\n%s", want, last)
		}
	}
	if strings.Contains(last, "Apache") || strings.Index(last, "Install") > strings.Index(last, "Configure") {
		t.Fatalf("the evidence is not the 3 best, best first:\n%s", last)
	}
	mr := modelRequests(t, events)[0]
	if got := keptOf(mr.Context, "evidence"); !slices.Equal(got, []string{"evidence/c1", "evidence/c2", "evidence/c3"}) {
		t.Fatalf("the report's evidence: %v (%+v)", got, mr.Context)
	}
	verifyDeterministic(t, *agent, events)
}

// Under budget pressure the lowest-scored evidence is dropped first, and the
// report says so.
func TestGatheredEvidenceDropsTheLowestScoredUnderBudget(t *testing.T) {
	hits := slices.Clone(guideHits)
	for i := range hits {
		hits[i].Content = strings.Repeat(fmt.Sprintf("passage %d of the guide says something useful. ", i+1), 12)
	}
	rag := &ragStub{hits: hits}
	model := &recordingModel{Model: script(t, text("done"))}
	deps, agent := gatherAgent(actors.ContextOptions{Evidence: 4, Window: 600, ReservedOutput: 100}, actors.ContextSources{KnowledgeTool: "rag"})
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{rag.tool()}, deps: deps})
	h.submit("b", "task-b", "What does the guide say?")
	events := h.wait("b")
	r := modelRequests(t, events)[0].Context
	kept := keptOf(r, "evidence")
	var dropped []messages.ContextItem
	for _, it := range r.Dropped {
		if it.Kind == "evidence" {
			dropped = append(dropped, it)
		}
	}
	if len(kept) == 0 || len(dropped) == 0 {
		t.Fatalf("want some evidence kept and some dropped: %+v", r)
	}
	minKept := 1.0
	for _, it := range r.Kept {
		if it.Kind == "evidence" {
			minKept = min(minKept, it.Score)
		}
	}
	for _, it := range dropped {
		if it.Reason != "budget" || it.Score > minKept {
			t.Fatalf("dropped %+v while evidence scoring %.3f was kept: %+v", it, minKept, r)
		}
	}
	if !slices.ContainsFunc(dropped, func(it messages.ContextItem) bool { return it.ID == "evidence/c4" }) || kept[0] != "evidence/c1" {
		t.Fatalf("kept %v, dropped %+v", kept, dropped)
	}
	if r.Used > r.Budget {
		t.Fatalf("over budget: %+v", r)
	}
	verifyDeterministic(t, *agent, events)
}

// Memories of the agent's namespace that match the task are recalled into the
// State section, each with its ID; the memory tool is the real one.
func TestGatherRecallsMemoriesIntoState(t *testing.T) {
	mem := memoryTools(t)
	if _, err := mem[0].Call(context.Background(), tools.Call{Key: "seed", Arguments: `{"op":"add","args":{"content":"The user's favourite editor is Helix.","tier":"semantic"}}`}); err != nil {
		t.Fatal(err)
	}
	model := &recordingModel{Model: script(t, text("Helix."))}
	deps, agent := gatherAgent(actors.ContextOptions{Recall: 5}, actors.ContextSources{MemoryTool: "memory", MemoryNamespace: "agent:learner"})
	h := newHarness(t, harnessOpts{model: model, tools: mem, deps: deps})
	h.submit("m", "task-m", "Which editor does the user like?")
	events := h.wait("m")
	calls := toolRequests(t, events)
	if len(calls) != 1 || calls[0].Purpose != actors.PurposeRecall || calls[0].Tool != "memory" ||
		!strings.Contains(calls[0].Arguments, `"op":"search"`) || !strings.Contains(calls[0].Arguments, `"namespace":"agent:learner"`) {
		t.Fatalf("the recall: %+v", calls)
	}
	last := model.requests("")[0].Messages
	briefing := last[len(last)-1].Content
	if !strings.Contains(briefing, "<state>") || !strings.Contains(briefing, "The user's favourite editor is Helix.") {
		t.Fatalf("the request lacks the memory in its state: %+v", last)
	}
	got := keptOf(modelRequests(t, events)[0].Context, "memory")
	if len(got) != 1 || !strings.HasPrefix(got[0], "memory/m_") {
		t.Fatalf("the report's memories: %v", got)
	}
	verifyDeterministic(t, *agent, events)
}

// A retrieval that fails does not fail the task: it goes on without the
// evidence, and the report says why.
func TestGatherFailureIsTolerated(t *testing.T) {
	rag := &ragStub{fail: "the knowledge base is unreachable"}
	model := &recordingModel{Model: script(t, text("I could not look it up, but: run troupe init."))}
	deps, agent := gatherAgent(actors.ContextOptions{Evidence: 5}, actors.ContextSources{KnowledgeTool: "rag"})
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{rag.tool()}, deps: deps})
	h.submit("f", "task-f", "How do I install troupe?")
	events := h.wait("f")
	completion(t, events)
	r := modelRequests(t, events)[0].Context
	if len(keptOf(r, "evidence")) != 0 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "evidence: rag failed") ||
		!strings.Contains(r.Notes[0], "unreachable") {
		t.Fatalf("the report: %+v", r)
	}
	if last := model.requests("")[0].Messages; strings.Contains(last[len(last)-1].Content, "<evidence>") {
		t.Fatalf("evidence sent: %+v", last)
	}
	verifyDeterministic(t, *agent, events)
}

// A session that died after its retrievals were answered, before its first model
// call, retrieves nothing again when it is resumed: it folds the recorded results
// and sends them. One that died with a retrieval unanswered re-issues that one
// only, with its key.
func TestGatherRefoldDoesNotRetrieveAgain(t *testing.T) {
	rag := &ragStub{hits: guideHits}
	mem := memoryTools(t)
	reg, err := tools.NewRegistry(append(mem, rag.tool())...)
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: reg.Specs(), Context: actors.ContextOptions{Evidence: 2, Recall: 3},
		Sources: actors.ContextSources{KnowledgeTool: "rag", MemoryTool: "memory"}}
	record := func(answer int) (string, []messages.Envelope) {
		st := actors.NewSessionState("s")
		var recorded []messages.Envelope
		add := func(p messages.Payload, cause string) {
			e := env(t, p, "s", st.LastSeq+1, "t")
			e.CausationID = cause
			if err := st.Apply(e); err != nil {
				t.Fatal(err)
			}
			recorded = append(recorded, e)
		}
		add(&messages.TaskSubmitted{Input: "How do I install troupe?", Rules: actors.ContextRules}, "")
		var reqs []*messages.ToolCallRequested
		for range 2 {
			d := st.Decide(agent, st.LastSeq+1, 0)
			r, ok := d.Payload.(*messages.ToolCallRequested)
			if !ok {
				t.Fatalf("decided %T before the retrievals", d.Payload)
			}
			add(r, d.CausationID)
			reqs = append(reqs, r)
		}
		if d := st.Decide(agent, st.LastSeq+1, 0); d != nil {
			t.Fatalf("decided %+v while retrievals are in flight", d.Payload)
		}
		for _, r := range reqs[:answer] {
			tool, _ := reg.Get(r.Tool)
			out, err := tool.Call(context.Background(), tools.Call{Key: r.Key, Arguments: r.Arguments})
			if err != nil {
				t.Fatal(err)
			}
			add(&messages.ToolCallCompleted{Key: r.Key, CallID: r.CallID, Tool: r.Tool, Result: out}, recorded[len(recorded)-1].ID)
		}
		dir := t.TempDir()
		lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer lg.Close()
		if err := lg.Append(context.Background(), recorded); err != nil {
			t.Fatal(err)
		}
		return dir, recorded
	}
	for _, answered := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d answered", answered), func(t *testing.T) {
			dir, recorded := record(answered)
			before := rag.calls.Load()
			model := &recordingModel{Model: script(t, text("Run troupe init."))}
			h := newHarness(t, harnessOpts{dir: dir, model: model, tools: append(mem, rag.tool()), deps: func(d *actors.SessionDeps) { d.Agent = agent }})
			h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
			events := h.wait("s")
			completion(t, events)
			if got := rag.calls.Load() - before; got != 0 {
				t.Fatalf("the rag tool was called %d times after the restart", got)
			}
			if n := len(toolRequests(t, events)); n != 2 {
				t.Fatalf("%d retrievals recorded, want 2: %s", n, types(events))
			}
			if answered == 1 {
				// The recall was re-issued with its key, and answered once.
				var done []*messages.ToolCallCompleted
				for _, e := range events[len(recorded):] {
					if e.Type == messages.TypeToolCallCompleted {
						done = append(done, decode[*messages.ToolCallCompleted](t, e))
					}
				}
				if len(done) != 1 || done[0].Tool != "memory" || done[0].Key != toolRequests(t, events)[1].Key {
					t.Fatalf("after the restart: %+v", done)
				}
			}
			if got := keptOf(modelRequests(t, events)[0].Context, "evidence"); !slices.Equal(got, []string{"evidence/c1", "evidence/c2"}) {
				t.Fatalf("evidence: %v", got)
			}
			verifyDeterministic(t, agent, events)
		})
	}
}

// Without gathering settings, an agent that has the rag and memory tools makes
// no retrieval: its sessions are what they were.
func TestNoGatheringWithoutSettings(t *testing.T) {
	rag := &ragStub{hits: guideHits}
	model := &recordingModel{Model: script(t, text("ok"))}
	deps, _ := gatherAgent(actors.ContextOptions{}, actors.ContextSources{KnowledgeTool: "rag", MemoryTool: "memory"})
	h := newHarness(t, harnessOpts{model: model, tools: append(memoryTools(t), rag.tool()), deps: deps})
	h.submit("n", "task-n", "Hello")
	events := h.wait("n")
	if got := types(events); got != "1:task.submitted 2:model.requested 3:model.responded 4:task.completed" {
		t.Fatalf("events: %s", got)
	}
}

// Notes found by the notes tool's search are State items "note/<id>", best
// first; a result that is not the tool's is noted in the report and sends
// nothing. The state alone decides it, from the recorded results.
func TestGatheredNotesAndAnUnreadableResult(t *testing.T) {
	agent := actors.Agent{Model: "m", Tools: []messages.ToolSpec{{Name: "notes_search"}, {Name: "memory"}},
		Context: actors.ContextOptions{Notes: 2, Recall: 3},
		Sources: actors.ContextSources{NotesTool: "notes", NotesExpanded: true, MemoryTool: "memory"}}
	st := actors.NewSessionState("s")
	add := func(p messages.Payload) {
		t.Helper()
		if err := st.Apply(env(t, p, "s", st.LastSeq+1, "t")); err != nil {
			t.Fatal(err)
		}
	}
	add(&messages.TaskSubmitted{Input: "Book the usual hotel", Rules: actors.ContextRules})
	var reqs []*messages.ToolCallRequested
	for range 2 {
		r, ok := st.Decide(agent, st.LastSeq+1, 0).Payload.(*messages.ToolCallRequested)
		if !ok {
			t.Fatal("no retrieval decided")
		}
		add(r)
		reqs = append(reqs, r)
	}
	if reqs[0].Purpose != actors.PurposeRecall || reqs[1].Purpose != actors.PurposeNotes || reqs[1].Tool != "notes_search" ||
		reqs[1].Arguments != `{"query":"Book the usual hotel","limit":2}` {
		t.Fatalf("retrievals %+v %+v", reqs[0], reqs[1])
	}
	add(&messages.ToolCallCompleted{Key: reqs[1].Key, CallID: reqs[1].CallID, Tool: reqs[1].Tool,
		Result: `{"notes":[{"id":"n2","type":"preference","tags":["travel"],"body":"Hotel Astoria, a room facing the yard."},{"id":"n1","type":"fact","body":"Trips are booked on Fridays."}],"matched":2}`})
	if d := st.Decide(agent, st.LastSeq+1, 0); d != nil {
		t.Fatalf("decided %T with the recall unanswered", d.Payload)
	}
	add(&messages.ToolCallCompleted{Key: reqs[0].Key, CallID: reqs[0].CallID, Tool: reqs[0].Tool, Result: "I found nothing."})
	mr, ok := st.Decide(agent, st.LastSeq+1, 0).Payload.(*messages.ModelRequested)
	if !ok || mr.Step != 1 {
		t.Fatalf("want the first model call, step 1: %+v", mr)
	}
	if got := keptOf(mr.Context, "note"); !slices.Equal(got, []string{"note/n2", "note/n1"}) {
		t.Fatalf("notes kept %v", got)
	}
	if len(mr.Context.Notes) != 1 || !strings.Contains(mr.Context.Notes[0], "recall: memory's result could not be read") {
		t.Fatalf("report notes %q", mr.Context.Notes)
	}
	add(mr)
	msgs := st.Request(agent).Messages
	if b := msgs[len(msgs)-1].Content; !strings.HasPrefix(b, "<state>\n[note n2, preference, #travel] Hotel Astoria") || !strings.Contains(b, "[note n1, fact] Trips") {
		t.Fatalf("the briefing: %q", b)
	}
}

// A source whose tool needs a human's approval is not searched before the task:
// nobody approved that call.
func TestNoGatheringThroughAToolThatNeedsApproval(t *testing.T) {
	agent := actors.Agent{Model: "m", Tools: []messages.ToolSpec{{Name: "rag"}, {Name: "memory"}},
		Context:   actors.ContextOptions{Evidence: 3, Recall: 3},
		Sources:   actors.ContextSources{KnowledgeTool: "rag", MemoryTool: "memory"},
		Approvals: map[string]bool{"rag": true}}
	st := actors.NewSessionState("s")
	if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "Where is the guide?", Rules: actors.ContextRules}, "s", 1, "t")); err != nil {
		t.Fatal(err)
	}
	r, ok := st.Decide(agent, 2, 0).Payload.(*messages.ToolCallRequested)
	if !ok || r.Tool != "memory" || r.Purpose != actors.PurposeRecall {
		t.Fatalf("decided %+v; want the memory search only", st.Decide(agent, 2, 0).Payload)
	}
}

// A paradigm's own model calls get what the task gathered, as the loop's do: a
// reflection's critic judges the draft against the same evidence, listed kept in
// its call's report, and the session still verifies.
func TestParadigmCallsGetTheGatheredEvidence(t *testing.T) {
	rag := &ragStub{hits: guideHits}
	model := &recordingModel{Model: script(t, text("Run troupe init."), text("```json\n{\"verdict\":\"PASS\"}\n```"))}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{rag.tool()}, deps: func(d *actors.SessionDeps) {
		d.Agent.Context = actors.ContextOptions{Evidence: 2}
		d.Agent.Sources = actors.ContextSources{KnowledgeTool: "rag", KnowledgeBase: "docs"}
		d.Agent.Paradigm = actors.Reflection{}
		agent = d.Agent
	}})
	h.submit("pg", "task-pg", "How do I install troupe?")
	events := h.wait("pg")
	completion(t, events)
	if got := purposes(t, events); got != "loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	if n := rag.calls.Load(); n != 1 {
		t.Fatalf("%d retrievals, want 1 for the task", n)
	}
	crit := model.requests(actors.PurposeCritique)
	if len(crit) != 1 {
		t.Fatalf("%d critiques", len(crit))
	}
	var all strings.Builder
	for _, m := range crit[0].Messages {
		all.WriteString(m.Content)
	}
	if !strings.Contains(all.String(), "Run troupe init to create the data directory.") || !strings.Contains(all.String(), "The node reads troupe.json") {
		t.Fatalf("the critic did not see the evidence: %q", all.String())
	}
	if strings.Contains(all.String(), "Troupe runs on Linux") {
		t.Fatalf("the critic saw more than the two chunks asked: %q", all.String())
	}
	reqs := modelRequests(t, events)
	if got := keptOf(reqs[1].Context, "evidence"); len(got) != 2 {
		t.Fatalf("the critique's report keeps evidence %v, want 2 items (report %+v)", got, reqs[1].Context)
	}
	verifyDeterministic(t, agent, events)
}
