package node_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A model names a member as it reads in the team's prompt but for its case
// ("Math" for math, "HANDOFF: Billing: ..." for billing, a judge's winner
// "Billing"): the orchestrator routes to that member, not to its fallback, the
// handoff goes to it, not failing the task with member_failed, and the debate takes
// its proposal, not ending with no_verdict (decision rules 9). Both sessions verify; relabelled as
// rules 8, which took only the exact name, each diverges where it took the member.
func TestTeamMemberNamedInAnotherCase(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"desk":    {{Content: `{"member": "Math", "reason": "the task is arithmetic"}`}},
		"math":    {{Content: "144"}},
		"prose":   {{Content: "a poem"}},
		"triage":  {{Content: "A refund question.\nHANDOFF: Billing: wants a refund"}},
		"billing": {{Content: "refunded"}},
		"judge":   {{Content: `{"verdict": "accept", "winner": "Billing", "reason": "it refunds"}`}},
	})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "math", Tools: []string{}}, {Name: "prose", Tools: []string{}},
		{Name: "triage", Tools: []string{}}, {Name: "billing", Tools: []string{}},
		{Name: "desk", Team: &actors.Team{Pattern: actors.TeamOrchestrator, Members: []actors.TeamMember{{Name: "math"}, {Name: "prose"}},
			ModelRouting: true, Fallback: "prose"}},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamHandoff, Members: []actors.TeamMember{{Name: "triage"}, {Name: "billing"}}}},
		{Name: "judge", Tools: []string{}},
		{Name: "panel", Team: &actors.Team{Pattern: actors.TeamDebate, Members: []actors.TeamMember{{Name: "math"}, {Name: "billing"}}, Judge: "judge", Rounds: 1}},
	}}
	n := nodetest.Start(t, cfg)
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ team, want, via string }{{"desk", "144", "work→math"}, {"line", "refunded", "handoff→triage handoff→billing"},
		{"panel", "refunded", "propose→math propose→billing judge→judge"}} {
		events := runAgentTask(t, n, node.Task{Input: "What is 12 * 12? I want a refund.", SessionID: "s-" + c.team, Agent: c.team})
		_, calls := teamChildren(t, events)
		if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != c.want || strings.Join(calls, " ") != c.via {
			t.Errorf("team %s: ended with %s, delegations %v; want %q via %s", c.team, events[len(events)-1].Type, calls, c.want, c.via)
			for _, f := range payloads[*messages.TaskFailed](t, events) {
				t.Logf("failed: %s: %s", f.Reason, f.Error)
			}
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %+v %v", c.team, div, err)
		}
		relabelled := append([]messages.Envelope(nil), events...)
		task := payloads[*messages.TaskSubmitted](t, relabelled[:1])[0]
		task.Rules = 8
		enc, err := messages.NewEnvelope(task)
		if err != nil {
			t.Fatal(err)
		}
		relabelled[0].Payload = enc.Payload
		if div, err := actors.VerifyAmong(all, relabelled); err != nil || div == nil {
			t.Errorf("verify %s relabelled as rules 8: %+v %v; want a divergence (rules 8 took no member in another case)", c.team, div, err)
		}
	}
}
