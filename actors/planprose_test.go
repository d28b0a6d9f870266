package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A planner's plan after prose holding braces (how a later step quotes an
// earlier one's result) is read as a verdict is (rules 16): the object holding
// "steps". Under 15 the text from the first '{' to the last '}' was taken for
// the plan, which is no JSON: the planner was asked again, a model call for
// nothing, and a task recorded under 15 refolds so.
func TestPlanAfterProseWithBracesIsRead(t *testing.T) {
	answer := "A later step would quote s1's result as {{s1}}; this task needs one step.\n" + calcPlan
	model := &recordingModel{Model: script(t, text(answer), text("2+3 is 5"))}
	h, agent := planHarness(t, model, actors.PlanExecute{}, tools.Calculator{})
	h.submit("prose", "task-prose", "What is 2+3?")
	events := h.wait("prose")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "2+3 is 5" {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	if model, steps := planCalls(t, events); strings.Join(model, ",") != "plan,answer" || strings.Join(steps, ",") != "s1" {
		t.Fatalf("model calls %v, steps %v; want the plan read at once", model, steps)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 15); div == nil || !strings.Contains(div.Actual, "model.requested") {
		t.Fatalf("under rules 15 the plan is not read and the planner is asked again: %+v", div)
	}
}
