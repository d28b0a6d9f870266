package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
	"github.com/troupe-run/troupe/tools"
)

// planHarness runs a session whose default agent is of the plan_execute paradigm.
func planHarness(t *testing.T, model llm.Model, pe actors.PlanExecute, ts ...tools.Tool) (*harness, actors.Agent) {
	t.Helper()
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: ts, maxSteps: 20, deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = pe
		d.MaxParallelTools = 8
		agent = d.Agent
	}})
	return h, agent
}

// planCalls lists the purposes of a session's model calls, and the call IDs of its
// step calls, in order.
func planCalls(t *testing.T, events []messages.Envelope) (model []string, steps []string) {
	t.Helper()
	for _, e := range events {
		switch e.Type {
		case messages.TypeModelRequested:
			model = append(model, decode[*messages.ModelRequested](t, e).Purpose)
		case messages.TypeToolCallRequested:
			if r := decode[*messages.ToolCallRequested](t, e); r.Purpose == actors.PurposeStep {
				steps = append(steps, r.CallID)
			}
		}
	}
	return model, steps
}

// The offline model plans a compound question as two independent calculator steps,
// which run in parallel (both requested before either answers), and joins them.
func TestPlanExecuteOfflineCompoundQuestion(t *testing.T) {
	h, agent := planHarness(t, llm.Offline{}, actors.PlanExecute{}, tools.Calculator{})
	h.submit("pe", "task-pe", "What is 2+3 and what is 4*5?")
	events := h.wait("pe")
	assertGapFree(t, events)
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "2+3 = 5 and 4*5 = 20" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	model, steps := planCalls(t, events)
	if strings.Join(model, ",") != "plan,answer" || strings.Join(steps, ",") != "s1,s2" {
		t.Fatalf("model calls %v, steps %v", model, steps)
	}
	requested := 0
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			requested++
		}
		if e.Type == messages.TypeToolCallCompleted && requested != 2 {
			t.Fatalf("a step answered before the second was requested: %s", types(events))
		}
	}
	verifyDeterministic(t, agent, events)
}

// A planner's answer that is not a plan goes back to it with the reason, and the
// task runs the plan it gives next.
func TestPlanExecuteMalformedPlanIsAskedAgain(t *testing.T) {
	model := &recordingModel{Model: script(t,
		llm.ScriptStep{Content: "Sure! First I will add the numbers."},
		llm.ScriptStep{Content: "```json\n{\"steps\": [{\"id\": \"s1\", \"tool\": \"calculator\", \"args\": {\"expression\": \"2+3\"}, \"deps\": []}]}\n```"},
		llm.ScriptStep{Content: "5"})}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("bad", "task-bad", "What is 2+3?")
	events := h.wait("bad")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "5" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, _ := planCalls(t, events); strings.Join(model, ",") != "plan,plan,answer" {
		t.Fatalf("model calls %v", model)
	}
	retry := model.requests(actors.PurposePlan)[1].Messages
	if n := len(retry); n != 4 || retry[2].Content != "Sure! First I will add the numbers." || !strings.Contains(retry[3].Content, "not a JSON object") {
		t.Fatalf("the second plan request does not show the answer and why it was refused: %+v", retry)
	}
	verifyDeterministic(t, agent, events)
}

// A plan whose steps depend on each other in a cycle is refused, naming the cycle;
// after MaxPlanRetries refused answers the task fails.
func TestPlanExecuteCycleFailsAfterRetries(t *testing.T) {
	const cyclic = `{"steps": [{"id": "a", "goal": "x", "deps": ["c"]}, {"id": "b", "goal": "y", "deps": ["a"]}, {"id": "c", "goal": "z", "deps": ["b"]}]}`
	model := &recordingModel{Model: script(t, llm.ScriptStep{Content: cyclic}, llm.ScriptStep{Content: cyclic})}
	h, agent := planHarness(t, model, actors.PlanExecute{MaxPlanRetries: 1}, tools.Calculator{})
	h.submit("cyc", "task-cyc", "Do three things.")
	events := h.wait("cyc")
	f := decode[*messages.TaskFailed](t, events[len(events)-1])
	if f.Reason != messages.ReasonPlanFailed || !strings.Contains(f.Error, "cycle: a → c → b → a") || !strings.Contains(f.Error, "2 answers") {
		t.Fatalf("failure: %+v", f)
	}
	if reqs := model.requests(actors.PurposePlan); len(reqs) != 2 || !strings.Contains(reqs[1].Messages[3].Content, "cycle: a → c → b → a") {
		t.Fatalf("the retry does not name the cycle: %d requests", len(reqs))
	}
	verifyDeterministic(t, agent, events)
}

// A failed step sends the plan back to the planner, which sees the results so far
// and the failure; the new plan keeps the finished step (not run again), splits the
// failed one into parts, and the step that depended on it waits for both parts and
// quotes them.
func TestPlanExecuteReplansAfterAFailedStep(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]int{}
	lookup := funcTool{"lookup", func(_ context.Context, c tools.Call) (string, error) {
		mu.Lock()
		runs[c.Arguments]++
		mu.Unlock()
		if strings.Contains(c.Arguments, "both") {
			return "", errors.New("too broad: ask for one city at a time")
		}
		return "sunny in " + c.Arguments, nil
	}}
	model := &recordingModel{Model: script(t,
		llm.ScriptStep{Content: `{"steps": [
			{"id": "s1", "tool": "calculator", "args": {"expression": "6*7"}, "deps": []},
			{"id": "s2", "tool": "lookup", "args": {"city": "both"}, "deps": []},
			{"id": "s3", "tool": "lookup", "args": {"city": "{{s1}} {{s2}}"}, "deps": ["s1", "s2"]}],
			"answer": "list them"}`},
		llm.ScriptStep{Content: `{"steps": [
			{"id": "s1", "tool": "calculator", "args": {"expression": "1+1"}, "deps": []},
			{"id": "s2.1", "tool": "lookup", "args": {"city": "Paris"}, "deps": []},
			{"id": "s2.2", "tool": "lookup", "args": {"city": "Rome"}, "deps": []},
			{"id": "s3", "tool": "lookup", "args": {"city": "{{s1}}: {{s2}}"}, "deps": ["s1", "s2"]}]}`},
		llm.ScriptStep{Content: "done"})}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{}, lookup)
	h.submit("re", "task-re", "Weather in Paris and Rome, and 6*7.")
	events := h.wait("re")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	model_, steps := planCalls(t, events)
	if strings.Join(model_, ",") != "plan,replan,answer" || strings.Join(steps, ",") != "s1,s2,s2.1,s2.2,s3" {
		t.Fatalf("model calls %v, steps %v", model_, steps)
	}
	brief := model.requests(actors.PurposeReplan)[0].Messages[2].Content
	if !strings.Contains(brief, "[s1] finished: 42") || !strings.Contains(brief, "[s2] FAILED: too broad") || !strings.Contains(brief, "[s3] not run") {
		t.Fatalf("the re-plan brief: %s", brief)
	}
	mu.Lock()
	defer mu.Unlock()
	// s1 kept its recorded result (42, not the new plan's 1+1), so s3 quotes 42 and
	// both parts of s2.
	if want := `{"city":"42: sunny in {\"city\":\"Paris\"}\nsunny in {\"city\":\"Rome\"}"}`; runs[want] != 1 {
		t.Fatalf("s3 did not run with its deps' results: %v", runs)
	}
	if answer := model.requests(actors.PurposeAnswer)[0].Messages[1].Content; !strings.Contains(answer, "[s2.2] lookup") || !strings.Contains(answer, "How to answer: list them") {
		t.Fatalf("the answer prompt: %s", answer)
	}
	verifyDeterministic(t, agent, events)
}

// A step that keeps failing fails the task once its re-plans are used up.
func TestPlanExecuteFailsWhenNoReplanIsLeft(t *testing.T) {
	broken := funcTool{"broken", func(context.Context, tools.Call) (string, error) { return "", errors.New("down") }}
	const p = `{"steps": [{"id": "s1", "tool": "broken", "deps": []}]}`
	h, agent := planHarness(t, script(t, llm.ScriptStep{Content: p}, llm.ScriptStep{Content: p}), actors.PlanExecute{MaxReplans: 1}, broken)
	h.submit("nf", "task-nf", "go")
	events := h.wait("nf")
	f := decode[*messages.TaskFailed](t, events[len(events)-1])
	if f.Reason != messages.ReasonPlanFailed || !strings.Contains(f.Error, "step s1 failed: down; no re-plan is left (1 made)") {
		t.Fatalf("failure: %+v", f)
	}
	if _, steps := planCalls(t, events); strings.Join(steps, ",") != "s1,s1#2" {
		t.Fatalf("steps %v", steps)
	}
	verifyDeterministic(t, agent, events)
}

// A step with only a goal is worked by the agent's own tool loop: its goal joins
// the conversation, the loop calls tools, and its final answer is the step's result.
func TestPlanExecuteGoalStepRunsTheLoop(t *testing.T) {
	model := script(t,
		llm.ScriptStep{Content: `{"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "2+3"}, "deps": []},
			{"id": "s2", "goal": "double it", "deps": ["s1"]}]}`},
		calls(messages.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"5*2"}`}),
		llm.ScriptStep{Content: "10"},
		llm.ScriptStep{Content: "the answer is 10"})
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("loop", "task-loop", "Add 2 and 3, then double it.")
	events := h.wait("loop")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "the answer is 10" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, _ := planCalls(t, events); strings.Join(model, ",") != "plan,,,answer" {
		t.Fatalf("model calls %q", model)
	}
	verifyDeterministic(t, agent, events)
}

// A step naming an agent, and with an executor a step with only a goal, is a call
// of the delegate tool with the goal and the results it builds on; a step whose
// result lacks what the plan expected of it is re-planned like a failed one.
func TestPlanExecuteDelegatesAndReplansOnAContradiction(t *testing.T) {
	var mu sync.Mutex
	var delegated []string
	delegate := funcTool{actors.DelegateTool, func(_ context.Context, c tools.Call) (string, error) {
		mu.Lock()
		delegated = append(delegated, c.Arguments)
		mu.Unlock()
		if strings.Contains(c.Arguments, "find the capital") {
			return "Lyon", nil
		}
		return "checked", nil
	}}
	model := script(t,
		llm.ScriptStep{Content: `{"steps": [
			{"id": "s1", "agent": "researcher", "goal": "find the capital of France", "expect": "Paris", "deps": []},
			{"id": "s2", "goal": "check it", "deps": ["s1"]}]}`},
		llm.ScriptStep{Content: `{"steps": [{"id": "s1", "goal": "look the capital of France up in an atlas", "deps": []},
			{"id": "s2", "goal": "check it", "deps": ["s1"]}]}`},
		llm.ScriptStep{Content: "Paris, checked"})
	pe := actors.PlanExecute{Agents: map[string]string{"researcher": "finds facts", "checker": "checks facts"}, Executor: "checker"}
	h, agent := planHarness(t, model, pe, delegate)
	h.submit("dg", "task-dg", "What is the capital of France?")
	events := h.wait("dg")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, steps := planCalls(t, events); strings.Join(model, ",") != "plan,replan,answer" || strings.Join(steps, ",") != "s1,s1#2,s2" {
		t.Fatalf("model calls %v, steps %v", model, steps)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delegated) != 3 || !strings.Contains(delegated[0], `"agent":"researcher"`) || !strings.Contains(delegated[1], `"agent":"checker"`) ||
		!strings.Contains(delegated[2], `"agent":"checker"`) || !strings.Contains(delegated[2], `[s1] look the capital of France up in an atlas\nchecked`) {
		t.Fatalf("delegated: %q", delegated)
	}
	verifyDeterministic(t, agent, events)
}

// The concurrency bound holds: with five independent steps and a bound of 2, never
// more than two step calls are requested and unanswered at once, and two are.
func TestPlanExecuteBoundsItsConcurrency(t *testing.T) {
	slow := funcTool{"slow", func(ctx context.Context, c tools.Call) (string, error) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
		}
		return "ok " + c.Arguments, nil
	}}
	model := script(t, llm.ScriptStep{Content: `{"steps": [` +
		`{"id": "a", "tool": "slow", "args": {"n": 1}}, {"id": "b", "tool": "slow", "args": {"n": 2}}, {"id": "c", "tool": "slow", "args": {"n": 3}},` +
		`{"id": "d", "tool": "slow", "args": {"n": 4}}, {"id": "e", "tool": "slow", "args": {"n": 5}}]}`}, llm.ScriptStep{Content: "done"})
	h, agent := planHarness(t, model, actors.PlanExecute{Concurrency: 2}, slow)
	h.submit("cc", "task-cc", "five things")
	events := h.wait("cc")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	open, most, requested := 0, 0, 0
	for _, e := range events {
		switch e.Type {
		case messages.TypeToolCallRequested:
			open++
			requested++
		case messages.TypeToolCallCompleted:
			open--
		}
		most = max(most, open)
	}
	if most != 2 || requested != 5 {
		t.Fatalf("at most %d step calls in flight of %d requested; want 2 of 5: %s", most, requested, types(events))
	}
	verifyDeterministic(t, agent, events)
}

// A goal step's loop may make its agent's compression calls (a proactive digest of
// each large tool result, a summary): those are not the planner's answers. Three
// digests within one goal step were read as three unreadable plans, and the task
// failed with plan_failed ("the planner gave no valid plan in 3 answers") with its
// plan running well.
func TestPlanExecuteGoalStepCompressionIsNoPlannerAnswer(t *testing.T) {
	page := strings.Repeat("lorem ipsum dolor sit amet ", 200)
	fetch := funcTool{"fetch", func(context.Context, tools.Call) (string, error) { return page, nil }}
	model := script(t,
		llm.ScriptStep{Content: `{"steps": [{"id": "s1", "goal": "read three pages", "deps": []}]}`},
		calls(messages.ToolCall{ID: "c1", Name: "fetch", Arguments: `{"page":1}`},
			messages.ToolCall{ID: "c2", Name: "fetch", Arguments: `{"page":2}`},
			messages.ToolCall{ID: "c3", Name: "fetch", Arguments: `{"page":3}`}),
		llm.ScriptStep{Content: "digest of page 1"},
		llm.ScriptStep{Content: "digest of page 2"},
		llm.ScriptStep{Content: "digest of page 3"},
		llm.ScriptStep{Content: "three pages of lorem ipsum"},
		llm.ScriptStep{Content: "the pages say lorem ipsum"})
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{fetch}, maxSteps: 20, deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = actors.PlanExecute{}
		d.Agent.Context.Compression = actors.Compression{Strategy: pctx.CompressProactive, ObservationTokens: 100}
		agent = d.Agent
	}})
	h.submit("dig", "task-dig", "Read the three pages.")
	events := h.wait("dig")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "the pages say lorem ipsum" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, _ := planCalls(t, events); strings.Join(model, ",") != "plan,,digest,digest,digest,,answer" {
		t.Fatalf("model calls %q", model)
	}
	verifyDeterministic(t, agent, events)
	// Under rules 5 the third digest failed the task: the recording diverges there.
	if div := underOlderRules(t, agent, events, 5); div == nil || !strings.HasPrefix(div.Actual, string(messages.TypeTaskFailed)+" {\"reason\":\"plan_failed\"") {
		t.Fatalf("relabelled to rules 5: %+v, want a divergence at the task's failure", div)
	}
}

// loopGatedModel holds each of the loop's model calls (no purpose) until gate is
// closed, or for a few seconds at most (a hang guard: an answer that comes late
// shows in the recorded order of events, which the test reads).
type loopGatedModel struct {
	llm.Model
	gate chan struct{}
}

func (m loopGatedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	if r.Purpose == "" {
		select {
		case <-m.gate:
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	return m.Model.Generate(ctx, r)
}

// stepsBesideLoop returns the step calls requested between the loop's (first)
// model request and its answer.
func stepsBesideLoop(t *testing.T, events []messages.Envelope) []string {
	t.Helper()
	key := ""
	var out []string
	for _, e := range events {
		switch e.Type {
		case messages.TypeModelRequested:
			if r := decode[*messages.ModelRequested](t, e); r.Purpose == "" && key == "" {
				key = r.Key
			}
		case messages.TypeModelResponded:
			if key != "" && decode[*messages.ModelResponded](t, e).Key == key {
				return out
			}
		case messages.TypeToolCallRequested:
			if r := decode[*messages.ToolCallRequested](t, e); key != "" && r.Purpose == actors.PurposeStep {
				out = append(out, r.CallID)
			}
		}
	}
	t.Fatalf("the loop's model call was not answered: %s", types(events))
	return nil
}

const besidePlan = `{"steps": [{"id": "g", "goal": "think it over", "deps": []},
	{"id": "a", "tool": "lookup", "args": {"q": "a"}, "deps": []},
	{"id": "b", "tool": "lookup", "args": {"q": "after {{a}}"}, "deps": ["a"]}]}`

// The steps that are ready run while a goal step's loop waits for the model: a tool
// step with no deps, and the one that depends on it once it finished, start and
// finish before the goal step's answer comes (rules 6). Under rules 5 they waited
// for that answer: the recording diverges at the first of them.
func TestPlanExecuteStepsRunBesideAGoalStep(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	lookup := funcTool{"lookup", func(_ context.Context, c tools.Call) (string, error) {
		if strings.Contains(c.Arguments, "after") {
			once.Do(func() { close(gate) })
		}
		return "found " + c.Arguments, nil
	}}
	model := loopGatedModel{Model: script(t, text(besidePlan), text("thought over"), text("done")), gate: gate}
	h, agent := planHarness(t, model, actors.PlanExecute{}, lookup)
	h.submit("bs", "task-bs", "Look a up, then b, and think it over.")
	events := h.wait("bs")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "done" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if beside := stepsBesideLoop(t, events); strings.Join(beside, ",") != "a,b" {
		t.Fatalf("steps requested while the goal step's model call was in flight: %v, want a,b: %s", beside, types(events))
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 5); div == nil || div.Actual != "nothing (the agent waits)" || !strings.Contains(div.Expected, `"call_id":"a"`) {
		t.Fatalf("relabelled to rules 5: %+v, want a divergence at step a's call", div)
	}
}

// The plan's concurrency counts a goal step: with a bound of 1 no step starts
// while the goal step's loop runs.
func TestPlanExecuteGoalStepCountsAgainstConcurrency(t *testing.T) {
	lookup := funcTool{"lookup", func(_ context.Context, c tools.Call) (string, error) { return "found " + c.Arguments, nil }}
	model := script(t, text(besidePlan), text("thought over"), text("done"))
	h, agent := planHarness(t, model, actors.PlanExecute{Concurrency: 1}, lookup)
	h.submit("bc", "task-bc", "Look a up, then b, and think it over.")
	events := h.wait("bc")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if beside := stepsBesideLoop(t, events); len(beside) != 0 {
		t.Fatalf("steps requested beside the goal step with a concurrency of 1: %v", beside)
	}
	if _, steps := planCalls(t, events); strings.Join(steps, ",") != "a,b" {
		t.Fatalf("steps %v", steps)
	}
	verifyDeterministic(t, agent, events)
}

// A refused plan is quoted back to the planner clipped: a plan of ten thousand steps
// was quoted whole in each retry (about 123K prompt tokens). Its head and tail stay,
// with how much was left out (rules 6); under rules 5 the retry's prompt differs.
func TestPlanExecuteRefusedPlanIsQuotedClipped(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"steps": [`)
	for i := range 10000 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"id": "s%d", "tool": "calculator", "args": {"expression": "%d+1"}, "deps": []}`, i, i)
	}
	b.WriteString(`]}`)
	huge := b.String()
	model := &recordingModel{Model: script(t, text(huge), text(calcPlan), text("5"))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("big", "task-big", "What is 2+3?")
	events := h.wait("big")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "5" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	retry := model.requests(actors.PurposePlan)[1].Messages
	quoted := retry[2].Content
	if len(quoted) > 4200 || !strings.HasPrefix(quoted, `{"steps": [{"id": "s0"`) || !strings.HasSuffix(quoted, `"9999+1"}, "deps": []}]}`) ||
		!strings.Contains(quoted, " bytes left out …]") {
		t.Fatalf("the retry quotes %d bytes of the %d-byte answer: %.300s … %.300s", len(quoted), len(huge), quoted, quoted[max(len(quoted)-300, 0):])
	}
	if !strings.Contains(retry[3].Content, "the plan has 10000 steps, more than the 20 allowed") {
		t.Fatalf("the retry does not say why: %.500s", retry[3].Content)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 5); div == nil || !strings.HasPrefix(div.Expected, string(messages.TypeModelRequested)) || !strings.Contains(div.Expected, `"purpose":"plan"`) {
		t.Fatalf("relabelled to rules 5: %+v, want a divergence at the retry's request", div)
	}
}

// The re-plan brief shows the plan with a step of no dependencies as "deps":[], as
// the planner was asked to write it, where it showed "deps":null (rules 6; under
// rules 5 the re-plan's prompt differs).
func TestPlanExecuteReplanBriefShowsNoDepsAsEmpty(t *testing.T) {
	broken := funcTool{"broken", func(context.Context, tools.Call) (string, error) { return "", errors.New("down") }}
	const p = `{"steps": [{"id": "s1", "tool": "broken"}, {"id": "s2", "tool": "calculator", "args": {"expression": "1+1"}, "deps": []}]}`
	model := &recordingModel{Model: script(t, text(p), text(p))}
	h, agent := planHarness(t, model, actors.PlanExecute{MaxReplans: 1}, broken, tools.Calculator{})
	h.submit("dn", "task-dn", "go")
	events := h.wait("dn")
	if f := failure(t, events); f.Reason != messages.ReasonPlanFailed {
		t.Fatalf("failure: %+v", f)
	}
	brief := model.requests(actors.PurposeReplan)[0].Messages[2].Content
	if !strings.Contains(brief, `{"id":"s1","tool":"broken","args":{},"deps":[]}`) || !strings.Contains(brief, `"args":{"expression":"1+1"},"deps":[]}`) || strings.Contains(brief, "null") {
		t.Fatalf("the re-plan brief: %s", brief)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 5); div == nil || !strings.HasPrefix(div.Expected, string(messages.TypeModelRequested)) || !strings.Contains(div.Expected, `"purpose":"replan"`) {
		t.Fatalf("relabelled to rules 5: %+v, want a divergence at the re-plan's request", div)
	}
}

// A planner that gives up with a huge answer (a step ID of 100 KB) fails its task
// with why clipped, as its retries quoted it (rules 6): task.failed held the whole
// reason, the step ID whole, under rules 5.
func TestPlanExecuteGivesUpWithWhyClipped(t *testing.T) {
	bad := `{"steps": [{"id": "` + strings.Repeat("x", 100_000) + `", "tool": "nope"}]}`
	model := &recordingModel{Model: script(t, text(bad), text(bad), text(bad), text(bad))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("gu", "task-gu", "What is 2+3?")
	events := h.wait("gu")
	f := failure(t, events)
	if f.Reason != messages.ReasonPlanFailed || len(f.Error) > 1500 || !strings.Contains(f.Error, " bytes left out …]") {
		t.Fatalf("failure %s with %d bytes: %.300s", f.Reason, len(f.Error), f.Error)
	}
	verifyDeterministic(t, agent, events)
	// Under rules 5 the retries quoted it whole already.
	if div := underOlderRules(t, agent, events, 5); div == nil || !strings.Contains(div.Expected, `"purpose":"plan"`) {
		t.Fatalf("relabelled to rules 5: %+v, want a divergence at the first retry", div)
	}
}
