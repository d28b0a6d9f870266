package actors

import (
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The agent a running task decides with is the one it names, run through the
// task's rules (taskState.runs): as given for a task under today's rules (where
// ActiveTaskAgent skips runs and its copies), under its older rules for one
// recorded with them, and the zero agent for a name the node does not have.
func TestActiveTaskAgentIsTheNamedAgentUnderTheTasksRules(t *testing.T) {
	def := Agent{Name: "default", SystemPrompt: "def", MaxSteps: 3}
	calc := Agent{Name: "calc", SystemPrompt: "calc", MaxSteps: 5}
	as := Agents{Default: def, Named: map[string]Agent{"calc": calc}}
	for _, c := range []struct {
		agent string
		rules int
		want  Agent
	}{
		{"", ContextRules, def},
		{"default", ContextRules, def},
		{"calc", ContextRules, calc},
		{"calc", 1, calc.underRules(1)},
		{"nobody", ContextRules, Agent{}},
	} {
		st := NewSessionState("s")
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi", Agent: c.agent, Rules: c.rules})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CorrelationID = "e1", "s", 1, "e1"
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		if st.activeRules() != c.rules {
			t.Fatalf("task %q runs under rules %d, want %d", c.agent, st.activeRules(), c.rules)
		}
		got := st.ActiveTaskAgent(as)
		if got.Name != c.want.Name || got.SystemPrompt != c.want.SystemPrompt || got.MaxSteps != c.want.MaxSteps ||
			got.Context.rules != c.want.Context.rules || got.Context.Compression.Model != c.want.Context.Compression.Model {
			t.Fatalf("task %q under rules %d decides with %+v, want %+v", c.agent, c.rules, got, c.want)
		}
		if r := st.runAgent(calc); r.Context.rules != calc.underRules(c.rules).Context.rules {
			t.Fatalf("runAgent under rules %d: context rules %d, want %d", c.rules, r.Context.rules, calc.underRules(c.rules).Context.rules)
		}
	}
}
