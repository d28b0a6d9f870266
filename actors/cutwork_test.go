package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// underOlderRules returns the divergence Verify reports for events relabelled as
// recorded under rules version v.
func underOlderRules(t *testing.T, agent actors.Agent, events []messages.Envelope, v int) *actors.Divergence {
	t.Helper()
	relabelled := append([]messages.Envelope(nil), events...)
	task := decode[*messages.TaskSubmitted](t, relabelled[0])
	if task.Rules != actors.ContextRules {
		t.Fatalf("the task was recorded under rules %d", task.Rules)
	}
	task.Rules = v
	enc, err := messages.NewEnvelope(task)
	if err != nil {
		t.Fatal(err)
	}
	relabelled[0].Payload = enc.Payload
	// Verified among agents that run the task's agent by its name too (a team's
	// task names it): an unknown agent is no divergence (it cannot be re-decided).
	as := actors.Agents{Default: agent}
	if task.Agent != "" {
		as.Named = map[string]actors.Agent{task.Agent: agent}
	}
	div, err := actors.VerifyAmong(as, relabelled)
	if err != nil {
		t.Fatal(err)
	}
	return div
}

const calcPlan = `{"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "2+3"}, "deps": []}]}`

// Plan-and-execute's answer call is the task's final answer: cut at the output
// limit it fails the task with output_truncated (rules 4), as the loop's does, instead of completing it with the cut text.
func TestPlanExecuteCutAnswerFailsTheTask(t *testing.T) {
	model := &recordingModel{Model: script(t, text(calcPlan), llm.ScriptStep{Content: "2+3 is 5, and the other half of", FinishReason: "length"})}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("cut", "task-cut", "What is 2+3?")
	events := h.wait("cut")
	f := failure(t, events)
	if f.Reason != messages.ReasonOutputTruncated || !strings.Contains(f.Error, "cut after 31 characters") {
		t.Fatalf("failure %+v; want output_truncated", f)
	}
	if model, _ := planCalls(t, events); strings.Join(model, ",") != "plan,answer" {
		t.Fatalf("model calls %v", model)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil || !strings.Contains(div.Actual, "task.completed") {
		t.Fatalf("under rules 3 the task completes with the cut text: %+v", div)
	}
}

// Plan-and-execute's answer call, ended by the provider with a word of its own
// (Gemini's recitation), fails the task with content_filter (rules 5), as the
// loop's final answer does; under rules 4 the task completed with the text.
func TestPlanExecuteAnswerTheProviderEndedFailsTheTask(t *testing.T) {
	model := &recordingModel{Model: script(t, text(calcPlan), llm.ScriptStep{Content: "2+3 is 5", FinishReason: "recitation"})}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("ended", "task-ended", "What is 2+3?")
	events := h.wait("ended")
	f := failure(t, events)
	if f.Reason != messages.ReasonContentFilter || !strings.Contains(f.Error, `(finish_reason "recitation"): 2+3 is 5`) {
		t.Fatalf("failure %+v; want content_filter", f)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 4); div == nil || !strings.Contains(div.Actual, "task.completed") {
		t.Fatalf("under rules 4 the task completes with the text: %+v", div)
	}
}

// A plan cut at the output limit is not run, even when the JSON object at its
// head is whole: it is asked again with why, as an unreadable plan is.
func TestPlanExecuteCutPlanIsAskedAgain(t *testing.T) {
	model := &recordingModel{Model: script(t,
		llm.ScriptStep{Content: calcPlan, FinishReason: "length"},
		text(calcPlan), text("5"))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("cut", "task-cut", "What is 2+3?")
	events := h.wait("cut")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "5" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, steps := planCalls(t, events); strings.Join(model, ",") != "plan,plan,answer" || len(steps) != 1 {
		t.Fatalf("model calls %v, steps %v", model, steps)
	}
	retry := model.requests(actors.PurposePlan)[1].Messages
	if !strings.Contains(retry[len(retry)-1].Content, "cut at the output token limit") {
		t.Fatalf("the second plan request does not say why the first was refused: %+v", retry[len(retry)-1])
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the cut plan runs: the events must diverge")
	}
}

// A critic's verdict cut at the output limit is asked again, as an unreadable
// one is, not taken from the JSON object at its head.
func TestReflectionCutVerdictIsAskedAgain(t *testing.T) {
	events, model, agent := reflecting(t, actors.Reflection{}, nil, text("It is 4"),
		llm.ScriptStep{Content: pass + "\n\nThe answer is right, but one could also say that", FinishReason: "length"},
		text(`{"verdict": "revise", "issues": [{"issue": "no unit"}]}`), text("It is 4 km"), text(pass))
	done := completion(t, events)
	if done.Output != "It is 4 km" {
		t.Fatalf("completion %+v", done)
	}
	if got := purposes(t, events); got != "loop,critique,critique,loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	retry := model.requests(actors.PurposeCritique)[1].Messages
	if !strings.Contains(retry[len(retry)-1].Content, "cut at the output token limit") {
		t.Fatalf("the second critique request does not say why: %+v", retry[len(retry)-1])
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the cut verdict passes: the events must diverge")
	}
}

// An orchestrator's routing answer cut at the output limit goes to the fallback,
// with why, rather than to the member named at its head.
func TestTeamCutRoutingAnswerFallsBack(t *testing.T) {
	agent := newTeamAgent(t, "desk", "scripted", actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"),
		ModelRouting: true, Fallback: "writer"})
	model := &countingModel{Model: script(t, llm.ScriptStep{Content: `{"member": "calc", "reason": "arithmetic"} and as for the`, FinishReason: "length"})}
	d := newDelegates(map[string]memberFunc{"calc": answer("4"), "writer": answer("four")})
	events := runTeam(t, agent, model, d, "2+2")
	wantCompleted(t, events, "four")
	if ups := stateUpdates(t, events); !strings.Contains(ups[0], "writer: the fallback: the model's routing answer is not whole (the answer was cut at the output token limit") {
		t.Fatalf("state updates: %q", ups)
	}
	verifyTeam(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the cut routing answer is taken: the events must diverge")
	}
}

// A reflexion evaluation cut at the output limit is not read as a verdict.
func TestReflexionCutEvaluationIsNotRead(t *testing.T) {
	events, _, agent := reflecting(t, learner, memoryTools(t), text("66 km"),
		llm.ScriptStep{Content: pass + " because it", FinishReason: "length"})
	done := completion(t, events)
	if done.Output != "66 km" || !strings.Contains(done.Note, "the evaluation failed: its verdict could not be read: the answer was cut at the output token limit") {
		t.Fatalf("completion: %+v", done)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the cut evaluation passes: the events must diverge")
	}
}

// A critic passes an answer when the first word of its reply is PASS (rules 4):
// "Passing over …: FAIL" fails the answer, "**PASS**" passes it. Under rules 3
// the reply's first four letters decided, the other way round for both.
func TestTeamCriticPassIsItsFirstWord(t *testing.T) {
	cfg := actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "backup", "critic"),
		Routes: []actors.TeamRoute{{Match: "sum", Member: "calc"}}, Fallback: "backup", Check: actors.TeamCheck{Critic: "critic"}, Redispatch: 1}
	agent := newTeamAgent(t, "desk", "scripted", cfg)
	d := newDelegates(map[string]memberFunc{
		"calc":   answer("13"),
		"backup": answer("12"),
		"critic": func(task string, n int) (string, error) {
			if strings.Contains(task, `<answer by="backup">12</answer>`) {
				return "**PASS**", nil
			}
			return "Passing over the style: FAIL, 5+7 is 12", nil
		},
	})
	events := runTeam(t, agent, nil, d, "sum 5 and 7")
	wantCompleted(t, events, "12")
	if got := strings.Join(delegations(t, events), " "); got != "work→calc check→critic work→backup check→critic" {
		t.Fatalf("delegations: %s", got)
	}
	verifyTeam(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the critic's \"Passing …\" passes 13: the events must diverge")
	}
}

// A goal step the agent's loop answers with a reply cut at the output limit has no
// result: the step fails and is re-planned with why (rules 4), where under rules 3
// the cut text was the step's result.
func TestPlanExecuteCutGoalStepIsReplanned(t *testing.T) {
	model := &recordingModel{Model: script(t,
		text(`{"steps": [{"id": "g", "goal": "Work out 2+3", "deps": []}]}`),
		llm.ScriptStep{Content: "It is 5, and also", FinishReason: "length"},
		text(calcPlan), text("5"))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("cut", "task-cut", "What is 2+3?")
	events := h.wait("cut")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "5" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, steps := planCalls(t, events); strings.Join(model, ",") != "plan,,replan,answer" || len(steps) != 1 {
		t.Fatalf("model calls %q, steps %v", model, steps)
	}
	replan := model.requests(actors.PurposeReplan)
	if len(replan) != 1 || !strings.Contains(replan[0].Messages[len(replan[0].Messages)-1].Content, "its answer was not whole: the answer was cut at the output token limit after 17 characters") {
		t.Fatalf("the re-plan does not say why the step failed: %+v", replan)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 3); div == nil {
		t.Fatal("under rules 3 the cut text is the step's result: the events must diverge")
	}
}

// An empty planner answer is refused saying so (rules 4), not with the JSON
// decoder's bare "EOF", in the retry prompt and in the task's failure.
func TestPlanExecuteEmptyPlanSaysSo(t *testing.T) {
	model := &recordingModel{Model: script(t, text(" "), text(" \n"))}
	h, agent := planHarness(t, model, actors.PlanExecute{MaxPlanRetries: 1}, tools.Calculator{})
	h.submit("empty", "task-empty", "What is 2+3?")
	events := h.wait("empty")
	f := failure(t, events)
	if f.Reason != messages.ReasonPlanFailed || !strings.HasSuffix(f.Error, "the last one: the answer is empty") {
		t.Fatalf("failure %+v", f)
	}
	retry := model.requests(actors.PurposePlan)[1].Messages
	if !strings.Contains(retry[len(retry)-1].Content, "not a valid plan: the answer is empty.") {
		t.Fatalf("the retry: %+v", retry[len(retry)-1])
	}
	verifyDeterministic(t, agent, events)
}
