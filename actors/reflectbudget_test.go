package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// From rules 15 a reflection whose token budget is spent keeps the draft it has,
// as a final answer that crosses the budget is kept: given uncritiqued when the
// draft's own tokens reach it, not judged when the verdict's retry would, and as
// the draft the critic did not pass when the revision would. Under 14 each task
// failed with token_budget ("without a final answer"), its draft lost.
func TestReflectionDraftKeptAtTheTokenBudget(t *testing.T) {
	for _, c := range []struct {
		name    string
		budget  int
		steps   []llm.ScriptStep
		calls   string
		note    string
		outcome string
	}{
		{"draft", 1, []llm.ScriptStep{text("It is 4 km")}, "loop",
			"reflection: the answer was not critiqued: the task spent its token budget", "It is 4 km"},
		{"retry", 60, []llm.ScriptStep{text("It is 4 km"), text("Looks good to me")}, "loop,critique",
			"reflection: the critic's verdict could not be read (no JSON object found), and the task spent its token budget: the answer was not judged", "It is 4 km"},
		{"revision", 60, []llm.ScriptStep{text("It is 4"), text(revise)}, "loop,critique",
			"reflection: the revision stopped at the task's token budget; the answer is the draft of round 1, which the critic did not pass", "It is 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := &recordingModel{Model: script(t, c.steps...)}
			var agent actors.Agent
			h := newHarness(t, harnessOpts{model: model, deps: func(d *actors.SessionDeps) {
				d.Agent.Paradigm = actors.Reflection{}
				d.Agent.MaxTokens = c.budget
				agent = d.Agent
			}})
			h.submit("b", "task-b", "How far is it?")
			events := h.wait("b")
			done := completion(t, events)
			if done.Output != c.outcome || done.Note != c.note {
				t.Fatalf("completion %+v", done)
			}
			if got := purposes(t, events); got != c.calls {
				t.Fatalf("model calls: %s", got)
			}
			verifyDeterministic(t, agent, events)
			div := underOlderRules(t, agent, events, 14)
			if div == nil || !strings.Contains(div.Actual, string(messages.TypeTaskFailed)) || !strings.Contains(div.Actual, messages.ReasonTokenBudget) {
				t.Fatalf("under rules 14 the task fails with token_budget: %+v", div)
			}
		})
	}
}
