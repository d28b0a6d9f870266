package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Plan-and-execute's answer call is the task's final answer: with no text it
// fails the task with empty_answer (rules 15), as the loop's final answer does
// from rules 9. Under 14 the task completed with the white space.
func TestPlanExecuteEmptyAnswerFailsTheTask(t *testing.T) {
	model := &recordingModel{Model: script(t, text(calcPlan), text(" \n "))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("empty", "task-empty", "What is 2+3?")
	events := h.wait("empty")
	f := failure(t, events)
	if f.Reason != messages.ReasonEmptyAnswer || !strings.Contains(f.Error, "empty") || f.Steps != 2 {
		t.Fatalf("failure %+v; want empty_answer after 2 steps", f)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil || !strings.Contains(div.Actual, "task.completed") {
		t.Fatalf("under rules 14 the task completes with the white space: %+v", div)
	}
}

// A goal step its loop answered with no text fails and is re-planned (rules 15),
// as one with a cut answer is; under 14 it finished with the white space as its
// result, which the answer call was given.
func TestPlanExecuteEmptyGoalStepIsReplanned(t *testing.T) {
	model := &recordingModel{Model: script(t,
		text(`{"steps": [{"id": "s1", "goal": "find the distance", "deps": []}]}`),
		text(" "),
		text(`{"steps": [{"id": "s2", "tool": "calculator", "args": {"expression": "6*7"}, "deps": []}]}`),
		text("42 km"))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("goal", "task-goal", "How far is it?")
	events := h.wait("goal")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "42 km" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, steps := planCalls(t, events); strings.Join(model, ",") != "plan,,replan,answer" || strings.Join(steps, ",") != "s2" {
		t.Fatalf("model calls %v, steps %v", model, steps)
	}
	brief := model.requests(actors.PurposeReplan)[0].Messages
	if !strings.Contains(brief[len(brief)-1].Content, "[s1] FAILED: its answer was empty") {
		t.Fatalf("the re-plan's brief: %s", brief[len(brief)-1].Content)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil {
		t.Fatal("under rules 14 the empty step finishes: the events must diverge")
	}
}

// An answer call answered with tool calls and no text fails the same way (rules
// 15), its error saying so rather than "no tool calls": the call offers none.
func TestPlanExecuteEmptyAnswerWithToolCalls(t *testing.T) {
	model := &recordingModel{Model: script(t, text(calcPlan),
		calls(messages.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression": "2+3"}`}))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("calls", "task-calls", "What is 2+3?")
	events := h.wait("calls")
	f := failure(t, events)
	if f.Reason != messages.ReasonEmptyAnswer || !strings.Contains(f.Error, "no text, and 1 tool calls, which that call does not take") {
		t.Fatalf("failure %+v; want empty_answer naming the tool calls", f)
	}
	verifyDeterministic(t, agent, events)
}
