package actors_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/vectorstore"
)

// memoryTools returns the memory tool over memories of their own, allowed the
// namespace lessons:learner.
func memoryTools(t *testing.T) []tools.Tool {
	t.Helper()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memory.Open(memory.Config{Log: lg, Vectors: vs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close(); _ = vs.Close(); _ = lg.Close() })
	ts, err := mem.Tools(memory.ToolConfig{Namespace: "agent:learner", Namespaces: []string{"lessons:learner"}})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

var learner = actors.Reflexion{Namespace: "lessons:learner", Evaluate: true}

const theLesson = `{"what_went_wrong": "I said I could not convert miles.", "do_instead": "Multiply miles by 1.609 with the calculator."}`

// A poorly judged answer leaves a lesson in memory; a later similar task, in another
// session, finds it and has it in its loop's system prompt.
func TestReflexionStoresALessonAndALaterTaskRetrievesIt(t *testing.T) {
	model := &recordingModel{Model: script(t,
		text("I cannot convert units."),
		text(`{"verdict": "revise", "issues": [{"issue": "it did not convert", "suggestion": "compute it"}]}`),
		text(theLesson))}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: memoryTools(t), deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = learner
		agent = d.Agent
	}})
	h.submit("first", "task-1", "Convert 42 miles to km")
	first := h.wait("first")
	done := completion(t, first)
	if done.Output != "I cannot convert units." || !strings.Contains(done.Note, "judged the answer poor") || !strings.Contains(done.Note, "lesson stored as m_") {
		t.Fatalf("the first task: %+v", done)
	}
	if got := purposes(t, first); got != "loop,evaluate,lesson" {
		t.Fatalf("model calls: %s", got)
	}
	var store *messages.ToolCallRequested
	for _, e := range first {
		if e.Type == messages.TypeToolCallRequested {
			if r := decode[*messages.ToolCallRequested](t, e); r.Purpose == actors.PurposeStoreLesson {
				store = r
			}
		}
	}
	if store == nil || store.Tool != "memory" || !strings.Contains(store.Arguments, `"op":"add"`) ||
		!strings.Contains(store.Arguments, `Do instead: Multiply miles by 1.609`) || !strings.Contains(store.Arguments, `"namespace":"lessons:learner"`) {
		t.Fatalf("the lesson's store: %+v", store)
	}
	if ev := model.requests(actors.PurposeEvaluate)[0].Messages[0].Content; !strings.HasPrefix(ev, actors.DefaultEvaluatorPrompt) {
		t.Fatalf("the evaluator's rubric: %s", ev)
	}
	lessonReq := model.requests(actors.PurposeLesson)[0]
	if c := lessonReq.Messages[1].Content; !strings.Contains(c, "Convert 42 miles") || !strings.Contains(c, "it did not convert") {
		t.Fatalf("the lesson's prompt: %s", c)
	}
	verifyDeterministic(t, agent, first)

	h.submit("second", "task-2", "Convert 7 miles to km")
	second := h.wait("second")
	loop := model.requests("")
	sys := loop[len(loop)-1].Messages[0].Content
	if !strings.Contains(sys, "<lessons>") || !strings.Contains(sys, "Multiply miles by 1.609 with the calculator.") || !strings.HasPrefix(sys, "test\n\n") {
		t.Fatalf("the later task's system prompt: %q", sys)
	}
	if first := loop[0].Messages[0].Content; strings.Contains(first, "<lessons>") {
		t.Fatalf("the first task had lessons: %q", first)
	}
	if done := completion(t, second); !strings.Contains(done.Note, "1 lesson(s) of earlier tasks in the prompt") {
		t.Fatalf("the second task: %+v", done)
	}
	verifyDeterministic(t, agent, second)
}

// A task that fails (here: max steps) gets its lesson too, past its max steps, and
// still fails.
func TestReflexionLearnsFromAFailedTask(t *testing.T) {
	loopy := funcTool{"lookup", func(context.Context, tools.Call) (string, error) { return "nothing", nil }}
	model := &recordingModel{Model: script(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "1", Name: "lookup", Arguments: `{}`}}},
		text("```json\n"+theLesson+"\n```"))}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, maxSteps: 1, tools: append(memoryTools(t), loopy), deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = learner
		agent = d.Agent
	}})
	h.submit("f", "task-f", "Find the answer")
	events := h.wait("f")
	last := events[len(events)-1]
	if f := decode[*messages.TaskFailed](t, last); f.Reason != messages.ReasonMaxSteps || f.Steps != 2 {
		t.Fatalf("the outcome: %+v", f)
	}
	if got := purposes(t, events); got != "loop,lesson" {
		t.Fatalf("model calls: %s", got)
	}
	if c := model.requests(actors.PurposeLesson)[0].Messages[1].Content; !strings.Contains(c, "called lookup({})") || !strings.Contains(c, "lookup returned: nothing") ||
		!strings.Contains(c, "(max steps)") {
		t.Fatalf("the lesson's prompt: %s", c)
	}
	var stored bool
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			if c := decode[*messages.ToolCallCompleted](t, e); c.CallID == "store_lesson" && c.Error == "" && strings.Contains(c.Result, `"event":"ADD"`) {
				stored = true
			}
		}
	}
	if !stored {
		t.Fatalf("no lesson stored: %s", types(events))
	}
	verifyDeterministic(t, agent, events)
}

// An answer the evaluator passes leaves no lesson. The evaluator judges with the
// agent's rubric.
func TestReflexionPassedAnswerStoresNothing(t *testing.T) {
	strict := learner
	strict.EvaluatorPrompt = "Pass only answers with a unit."
	events, model, agent := reflecting(t, strict, memoryTools(t), text("66 km"), text(pass))
	if ev := model.requests(actors.PurposeEvaluate)[0].Messages[0].Content; !strings.HasPrefix(ev, "Pass only answers with a unit.\n\n") {
		t.Fatalf("the evaluator's rubric: %s", ev)
	}
	done := completion(t, events)
	if done.Output != "66 km" || done.Note != "reflexion: the evaluator passed the answer" {
		t.Fatalf("completion: %+v", done)
	}
	if got := purposes(t, events); got != "loop,evaluate" || strings.Contains(types(events), "tool.requested tool.completed tool.requested") {
		t.Fatalf("model calls: %s; events %s", got, types(events))
	}
	verifyDeterministic(t, agent, events)
}

// A session restarted after its lesson's store ran but before its result was
// recorded re-issues the store under the same key: the memory holds the lesson
// once, and no model call is asked again.
func TestReflexionResumedStoreWritesTheLessonOnce(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	mem := memoryTools(t)
	reg, err := tools.NewRegistry(mem...)
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: reg.Specs(), Paradigm: learner}
	st := actors.NewSessionState("s").WithAgents(actors.Agents{Default: agent})
	var recorded []messages.Envelope
	add := func(p messages.Payload) {
		e := env(t, p, "s", st.LastSeq+1, "t")
		e.ID = "s/" + strings.Repeat("x", int(e.Seq)) // unique, not an effect key
		if p.MessageType() == messages.TypeTaskSubmitted {
			e.ID = "t"
		}
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, e)
	}
	decide := func() messages.Payload { return st.Decide(agent, st.LastSeq+1, 0).Payload }
	reply := func(req *messages.ModelRequested, content string) {
		add(req)
		add(&messages.ModelResponded{Key: req.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: content}})
	}
	add(&messages.TaskSubmitted{Input: "Convert 42 miles to km"})
	search := decide().(*messages.ToolCallRequested)
	add(search)
	add(&messages.ToolCallCompleted{Key: search.Key, CallID: search.CallID, Tool: search.Tool, Result: `{"namespace":"lessons:learner","results":[]}`})
	reply(decide().(*messages.ModelRequested), "I cannot convert units.")
	reply(decide().(*messages.ModelRequested), `{"verdict": "revise", "issues": [{"issue": "it did not convert"}]}`)
	reply(decide().(*messages.ModelRequested), theLesson)
	store := decide().(*messages.ToolCallRequested)
	if store.Purpose != actors.PurposeStoreLesson {
		t.Fatalf("decided %+v", store)
	}
	add(store)
	// The store ran; the process died before its result was recorded.
	first, err := mem[0].Call(tools.WithCallKey(ctx, store.Key), tools.Call{Key: store.Key, Arguments: store.Arguments})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(ctx, recorded); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	model := &countingModel{Model: script(t, text("never asked"))}
	h := newHarness(t, harnessOpts{dir: dir, model: model, tools: mem, deps: func(d *actors.SessionDeps) { d.Agent = agent }})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	if model.total() != 0 {
		t.Fatalf("model calls after the restart: %v", model.calls)
	}
	again := decode[*messages.ToolCallCompleted](t, events[len(events)-2])
	if again.Key != store.Key || again.Result != first {
		t.Fatalf("the re-issued store answered %+v, the first %s", again, first)
	}
	found, err := mem[0].Call(ctx, tools.Call{Key: "check", Arguments: `{"op":"search","args":{"namespace":"lessons:learner","query":"miles"}}`})
	if err != nil || strings.Count(found, `"id":"m_`) != 1 {
		t.Fatalf("the namespace holds %s (%v): want the lesson once", found, err)
	}
	if done := completion(t, events); !strings.Contains(done.Note, "lesson stored as m_") {
		t.Fatalf("completion: %+v", done)
	}
}
