package nodeconfig

import (
	"strings"
	"testing"
)

// An agent's and a team's max_subagents is its node.NamedAgent's MaxSubAgents; out
// of range, it is refused with its line.
func TestParseAgentsMaxSubAgents(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  lead:
    max_subagents: 5
  helper:
    tools: []
teams:
  crew:
    pattern: pipeline
    members: [helper]
    max_subagents: 200
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, a := range f.NodeAgents() {
		got[a.Name] = a.MaxSubAgents
	}
	if got["lead"] != 5 || got["helper"] != 0 || got["crew"] != 200 {
		t.Errorf("max_subagents by agent: %v; want lead 5, helper 0 (the node's), crew 200", got)
	}
	for _, bad := range []string{"agents:\n  a:\n    max_subagents: 0\n", "agents:\n  a:\n    max_subagents: 1001\n",
		"agents:\n  a:\n    tools: []\nteams:\n  t:\n    pattern: pipeline\n    members: [a]\n    max_subagents: many\n"} {
		_, err := ParseAgents("agents.yaml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), "max_subagents") || !strings.Contains(err.Error(), "from 1 to 1000") {
			t.Errorf("%q: %v; want max_subagents's range", bad, err)
		}
	}
}
