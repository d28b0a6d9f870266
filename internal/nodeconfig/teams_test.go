package nodeconfig

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

const goodTeams = `agents:
  calculator:
    description: Does arithmetic.
    tools: [calculator]
  writer:
    description: Writes.
    tools: []
  judge: {}
teams:
  desk:
    description: Arithmetic to the calculator, the rest to the writer.
    pattern: orchestrator
    members: [calculator, writer]
    routes:
      - {match: "\\d\\s*[-+*/]\\s*\\d", member: calculator}
    router: model
    fallback: writer
    check: {critic: judge}
    redispatch: 2
  court:
    pattern: debate
    members: [calculator, writer]
    judge: judge
    rounds: 3
  line:
    pattern: pipeline
    members: [calculator, writer]
`

func TestParseTeams(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(goodTeams))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Teams) != 3 || f.Teams[0].Name != "court" || f.Teams[1].Name != "desk" || f.Teams[2].Name != "line" {
		t.Fatalf("teams = %+v, want court, desk and line, sorted", f.Teams)
	}
	desk := f.Teams[1].Team()
	if desk.Pattern != actors.TeamOrchestrator || !desk.ModelRouting || desk.Fallback != "writer" || desk.Check.Critic != "judge" ||
		desk.Redispatch != 2 || len(desk.Routes) != 1 || desk.Routes[0].Member != "calculator" || desk.Routes[0].Match != `\d\s*[-+*/]\s*\d` ||
		len(desk.Members) != 2 || desk.Members[1].Name != "writer" || f.Teams[1].Line != 10 {
		t.Errorf("desk = %+v (line %d)", desk, f.Teams[1].Line)
	}
	if court := f.Teams[0].Team(); court.Judge != "judge" || court.Rounds != 3 {
		t.Errorf("court = %+v", court)
	}
	if !f.Has("desk") || !f.Has("writer") || f.Has("nobody") {
		t.Error("Has does not know the file's agents and teams")
	}
	if got := f.Known(); !strings.HasSuffix(got, "; the teams are court, desk, line") {
		t.Errorf("Known() = %q", got)
	}
	named := f.NodeAgents()
	if len(named) != 6 || named[3].Name != "court" || named[3].Team == nil || named[0].Team != nil {
		t.Errorf("NodeAgents() = %+v: want the agents, then the teams", named)
	}
}

func TestParseTeamsErrors(t *testing.T) {
	const agents = "agents:\n  a: {}\n  b: {}\n" // lines 1-3; a team's name is on line 5
	for _, c := range []struct {
		name, teams string
		line        int
		want        string
	}{
		{"no teams", "teams: {}\n", 4, "teams: want a mapping"},
		{"no pattern", "teams:\n  t:\n    members: [a]\n", 5, `team "t": no pattern`},
		{"unknown pattern", "teams:\n  t:\n    pattern: swarm\n    members: [a]\n", 6, `unknown pattern "swarm"`},
		{"no members", "teams:\n  t:\n    pattern: pipeline\n", 5, "no members"},
		{"empty members", "teams:\n  t:\n    pattern: pipeline\n    members: []\n", 7, "want a list of the file's agents"},
		{"unknown member", "teams:\n  t:\n    pattern: pipeline\n    members:\n      - a\n      - zed\n", 9, `member "zed": want an agent of the file (a, b)`},
		{"team as member", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n  u:\n    pattern: pipeline\n    members: [t]\n", 10, `member "t": want an agent, not a team`},
		{"member twice", "teams:\n  t:\n    pattern: pipeline\n    members: [a, a]\n", 7, "listed twice"},
		{"named like an agent", "teams:\n  a:\n    pattern: pipeline\n    members: [b]\n", 5, "named like an agent"},
		{"unknown field", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    leader: a\n", 8, `unknown field "leader"`},
		{"setting of another pattern", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    judge: b\n", 8, "judge is a setting of the debate pattern, not of pipeline"},
		{"no fallback", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n", 5, "needs a fallback"},
		{"fallback not a member", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: b\n", 5, `fallback "b": want one of the members (a)`},
		{"bad route", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: a\n    routes:\n      - {match: \"(\", member: a}\n", 5, `route 1: match "("`},
		{"route field", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: a\n    routes:\n      - {when: x, member: a}\n", 10, `route 1: unknown field "when"`},
		{"router", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: a\n    router: llm\n", 9, `router "llm"`},
		{"check", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: a\n    check: always\n", 9, "check: want non_empty"},
		{"critic", "teams:\n  t:\n    pattern: orchestrator\n    members: [a]\n    fallback: a\n    check: {critic: c}\n", 9, `critic "c": want an agent`},
		{"no judge", "teams:\n  t:\n    pattern: debate\n    members: [a]\n", 5, "needs a judge"},
		{"rounds", "teams:\n  t:\n    pattern: debate\n    members: [a]\n    judge: b\n    rounds: 0\n", 9, "rounds"},
		{"unknown judge", "teams:\n  t:\n    pattern: debate\n    members: [a]\n    judge: j\n", 8, `judge "j": want an agent`},
		{"max handoffs", "teams:\n  t:\n    pattern: handoff\n    members: [a]\n    max_handoffs: 50\n", 8, "max_handoffs"},
		{"aggregator", "teams:\n  t:\n    pattern: fan_out\n    members: [a]\n    aggregator: z\n", 8, `aggregator "z": want an agent`},
		{"context field", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    context:\n      width: 10\n", 9, `team "t": context: unknown field "width"`},
		{"context window", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    context: {window: 10}\n", 8, `team "t": context: window "10"`},
		{"context gathers", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    context:\n      window: 4096\n      recall: 3\n", 10, `team "t": context: evidence, recall and notes are an agent's: a team gathers nothing`},
		{"max tokens", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    max_tokens: 0\n", 8, `team "t": max_tokens "0": want an integer from 1 to`},
		{"max cost", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    max_cost_usd: lots\n", 8, `team "t": max_cost_usd "lots": want a number of US dollars`},
		{"loop repeats", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    loop_repeats: 3\n", 8, `team "t": loop_repeats is an agent's, not a team's: loop detection judges a model's tool calls`},
		{"loop stale steps", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    loop_stale_steps: 0\n", 8, `team "t": loop_stale_steps is an agent's, not a team's`},
		{"approval timeout", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n    approval_timeout: 10m\n", 8, `team "t": approval_timeout is an agent's, not a team's: a team's hand-overs wait for no approval`},
		{"team twice", "teams:\n  t:\n    pattern: pipeline\n    members: [a]\n  t:\n    pattern: pipeline\n    members: [a]\n", 8, "declared twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAgents("agents.yaml", []byte(agents+c.teams))
			var fe *AgentsFileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want an AgentsFileError", err)
			}
			if fe.Line != c.line || !strings.Contains(fe.Msg, c.want) {
				t.Errorf("err = %v, want line %d and %q", err, c.line, c.want)
			}
		})
	}
}

// A team whose own system prompt leaves no room in its window is refused by the
// agents file's check, as the node refuses it at its start, at the team's line;
// a member's, at the member's line, naming its team. The same file with room
// passes.
func TestTeamPromptMustFit(t *testing.T) {
	long := strings.Repeat("Be careful and thorough. ", 400) // about 2,000 tokens
	file := func(teamPrompt, memberPrompt string) string {
		return `agents:
  first: {}
  second:
    system_prompt: "` + memberPrompt + `"
teams:
  crew:
    system_prompt: "` + teamPrompt + `"
    pattern: pipeline
    members: [first, second]
`
	}
	cfg := node.Config{Context: actors.ContextOptions{Window: 2048, ReservedOutput: 512}}
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"team", file(long, "Check."), 6, `team "crew": its system prompt is 2001 tokens, which leaves no room for a task in the context window of 2048 tokens less the 512 reserved`},
		{"member", file("Share.", long), 3, `agent "second", a member of team "crew": its system prompt is 2001 tokens and the schemas of the`},
	} {
		f, err := ParseAgents("agents.yaml", []byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		err = f.CheckNodeTools(cfg)
		var fe *AgentsFileError
		if !errors.As(err, &fe) || fe.Line != c.line || !strings.HasPrefix(fe.Msg, c.want) {
			t.Errorf("%s: %v; want line %d and %q", c.name, err, c.line, c.want)
		}
	}
	f, err := ParseAgents("agents.yaml", []byte(file("Share.", "Check.")))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CheckNodeTools(cfg); err != nil {
		t.Errorf("with room: %v", err)
	}
}

// A team's context section bounds its own model calls as an agent's does: the
// node builds the team with it (its summary model resolved as an agent's), and a
// setting the node refuses with its own (a window smaller than the node's
// reserved output) is refused at the line of the section.
func TestTeamContext(t *testing.T) {
	const file = `agents:
  a: {}
teams:
  crew:
    pattern: pipeline
    members: [a]
    context:
      window: %d
      history_turns: 7
      compression: summary
      summary_model: offline
`
	f, err := ParseAgents("agents.yaml", []byte(fmt.Sprintf(file, 4096)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ResolveModels(context.Background(), nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	crew := f.NodeAgents()[1]
	if crew.Name != "crew" || crew.Context.Window != 4096 || crew.Context.HistoryTurns != 7 || crew.Context.Compression.Strategy != "summary" ||
		crew.SummaryModel == nil || crew.SummaryModel.Name() != "offline" || crew.Context.Compression.Model != "offline" {
		t.Fatalf("team %q: context %+v, summary model %v; want window 4096, history 7, summary compression by offline", crew.Name, crew.Context, crew.SummaryModel)
	}
	cfg := node.Config{Model: llm.Offline{}, Context: actors.ContextOptions{ReservedOutput: 512}, Agents: f.NodeAgents()}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if got := all.Named["crew"].Context; got.Window != 4096 || got.ReservedOutput != 512 || got.HistoryTurns != 7 || got.Compression.Model != "offline" {
		t.Errorf("the node's team: context %+v; want the file's, and the node's reserved output", got)
	}
	f, err = ParseAgents("agents.yaml", []byte(fmt.Sprintf(file, 300)))
	if err != nil {
		t.Fatal(err)
	}
	err = f.CheckNodeTools(cfg)
	var fe *AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 7 || !strings.Contains(fe.Msg, `team "crew", with the default agent's context settings: context reserved output 512`) {
		t.Errorf("a window smaller than the node's reserved output: %v; want it refused at line 7", err)
	}
}

// A team's max_tokens and max_cost_usd are its node.NamedAgent's, the budgets of
// its task (its members' work included); a team that sets none has the node's.
func TestTeamBudgets(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  a: {}
teams:
  crew:
    pattern: pipeline
    members: [a]
    max_tokens: 500
    max_cost_usd: 0.25
  plain:
    pattern: pipeline
    members: [a]
`))
	if err != nil {
		t.Fatal(err)
	}
	named := f.NodeAgents()
	if crew := named[1]; crew.Name != "crew" || crew.MaxTokens != 500 || crew.MaxCostUSD != 0.25 {
		t.Fatalf("team %q: %d tokens, $%g; want 500 and $0.25", crew.Name, crew.MaxTokens, crew.MaxCostUSD)
	}
	cfg := node.Config{Model: llm.Offline{}, MaxTokens: 100_000, Agents: named}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if got := all.Named["crew"]; got.MaxTokens != 500 || got.MaxCostUSD != 0.25 {
		t.Errorf("the node's team: %d tokens, $%g; want the file's 500 and $0.25", got.MaxTokens, got.MaxCostUSD)
	}
	if got := all.Named["plain"]; got.MaxTokens != 100_000 || got.MaxCostUSD != 0 {
		t.Errorf("the node's team without budgets: %d tokens, $%g; want the node's 100000 and none", got.MaxTokens, got.MaxCostUSD)
	}
}
