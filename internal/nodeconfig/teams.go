package nodeconfig

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-run/troupe/actors"
)

// teamFieldNames are a team's fields; patternFields says which pattern has each of
// the pattern's settings (the others every team has).
var (
	teamFieldNames = []string{"description", "system_prompt", "pattern", "members", "routes", "router", "fallback", "check",
		"redispatch", "aggregator", "judge", "rounds", "max_handoffs", "max_steps", "max_tokens", "max_cost_usd", "max_subagents", "context"}
	// notTeamFields are an agent's fields a team has not, with why.
	notTeamFields = map[string]string{
		"loop_repeats":     "loop detection judges a model's tool calls, and a team's hand-overs are its pattern's",
		"loop_stale_steps": "loop detection judges a model's tool calls, and a team's hand-overs are its pattern's",
		"approval_timeout": "a team's hand-overs wait for no approval, its members' tool calls do",
	}
	patternFields = map[string]string{
		"routes": actors.TeamOrchestrator, "router": actors.TeamOrchestrator, "fallback": actors.TeamOrchestrator,
		"check": actors.TeamOrchestrator, "redispatch": actors.TeamOrchestrator,
		"aggregator": actors.TeamFanOut, "judge": actors.TeamDebate, "rounds": actors.TeamDebate, "max_handoffs": actors.TeamHandoff,
	}
)

// DeclaredTeam is one team of an agents file: a team is named and run like an agent
// (a task's "agent" names it), and its members are the file's agents, each handed
// its work as a sub-agent (package actors, Team).
//
//	teams:
//	  desk:
//	    description: Routes arithmetic to the calculator, the rest to the writer.
//	    pattern: orchestrator           # orchestrator, pipeline, fan_out, debate or handoff
//	    members: [calculator, writer]   # agents of this file
//	    routes:                         # orchestrator: tried in order on the task
//	      - {match: "\\d\\s*[-+*/]\\s*\\d", member: calculator}
//	    router: model                   # orchestrator: rules (default) or model, when no rule matches
//	    fallback: writer                # orchestrator: when nothing else decides
//	    check: non_empty                # orchestrator: non_empty, {regex: …} or {critic: agent}
//	    redispatch: 1                   # orchestrator: re-dispatches of a result that fails the check
//	    aggregator: writer              # fan_out: the agent that combines the answers
//	    judge: judge                    # debate: the agent that accepts a proposal
//	    rounds: 2                       # debate
//	    max_handoffs: 3                 # handoff
//	    context: {window: 32000, history_turns: 40} # its routing calls' (context.go); no evidence, recall, notes
//	    max_tokens: 20000               # its task's budget, its members' work included (stops.go)
//	    max_cost_usd: 0.50              # the same, in US dollars
//	    max_subagents: 100              # the hand-overs one task may make (default node.DefaultMaxSubAgents)
type DeclaredTeam struct {
	Name         string   `json:"name"`
	Description  string   `json:"description,omitempty"`
	SystemPrompt string   `json:"system_prompt,omitempty"`
	Pattern      string   `json:"pattern"`
	Members      []string `json:"members"`
	// Routes, Router ("rules" or "model"), Fallback, Check and Redispatch are an
	// orchestrator's; Aggregator a fan_out's; Judge and Rounds a debate's;
	// MaxHandoffs a handoff's.
	Routes      []DeclaredRoute `json:"routes,omitempty"`
	Router      string          `json:"router,omitempty"`
	Fallback    string          `json:"fallback,omitempty"`
	Check       string          `json:"check,omitempty"`
	Redispatch  int             `json:"redispatch,omitempty"`
	Aggregator  string          `json:"aggregator,omitempty"`
	Judge       string          `json:"judge,omitempty"`
	Rounds      int             `json:"rounds,omitempty"`
	MaxHandoffs int             `json:"max_handoffs,omitempty"`
	MaxSteps    int             `json:"max_steps,omitempty"`
	// MaxTokens and MaxCostUSD are the budgets of its tasks that set none (0: the
	// node's): as an agent's cover its sub-agents', a team's cover its whole task,
	// its routing calls and its members' work (node.NamedAgent). It has no loop
	// detection nor approvals: its members have theirs.
	MaxTokens  int     `json:"max_tokens,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// MaxSubAgents bounds the hand-overs (its members' child sessions) one of its
	// tasks makes (node.NamedAgent.MaxSubAgents; 0: the node's).
	MaxSubAgents int `json:"max_subagents,omitempty"`
	// Context is its context section (context.go), which bounds its own model
	// calls (an orchestrator's routing, its summaries); a zero field is the
	// node's. It gathers nothing (its members do): no evidence, recall nor notes.
	Context ContextFile `json:"context,omitzero"`
	// Line is where the team's name is in the file; contextLine where its context
	// section is.
	Line        int `json:"-"`
	contextLine int
	// check is Check parsed; lines are where each agent the team names is.
	check actors.TeamCheck
	lines map[string]int
}

// DeclaredRoute is an orchestrator's static rule: a task whose input matches Match
// (a case-insensitive regular expression; a keyword is one) goes to Member.
type DeclaredRoute struct {
	Match  string `json:"match"`
	Member string `json:"member"`
}

// Team returns the team's settings as the actors run them (members by name only:
// the node adds what each does).
func (t DeclaredTeam) Team() actors.Team {
	tm := actors.Team{Pattern: t.Pattern, ModelRouting: t.Router == "model", Fallback: t.Fallback, Check: t.check,
		Redispatch: t.Redispatch, Aggregator: t.Aggregator, Judge: t.Judge, Rounds: t.Rounds, MaxHandoffs: t.MaxHandoffs}
	for _, m := range t.Members {
		tm.Members = append(tm.Members, actors.TeamMember{Name: m})
	}
	for _, r := range t.Routes {
		tm.Routes = append(tm.Routes, actors.TeamRoute{Match: r.Match, Member: r.Member})
	}
	return tm
}

// parseTeam reads one team of the "teams" mapping.
func parseTeam(path string, k, v *yaml.Node) (DeclaredTeam, error) {
	fail := func(line int, format string, args ...any) (DeclaredTeam, error) {
		return DeclaredTeam{}, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	name := k.Value
	if k.Kind != yaml.ScalarNode || !agentName.MatchString(name) || name == "default" {
		return fail(k.Line, "team name %q: want 1 to 64 lower-case letters, digits, '_' or '-', starting with a letter, not \"default\"", name)
	}
	if v.Kind != yaml.MappingNode {
		return fail(v.Line, "team %q: want a mapping of its fields (%s)", name, strings.Join(teamFieldNames, ", "))
	}
	t := DeclaredTeam{Name: name, Line: k.Line, lines: map[string]int{}}
	str := func(n *yaml.Node, field string) (string, error) {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Value == "" {
			return "", &AgentsFileError{Path: path, Line: n.Line, Msg: fmt.Sprintf("team %q: %s: want a non-empty string", name, field)}
		}
		return n.Value, nil
	}
	num := func(n *yaml.Node, field string, lo, hi int, into *int) error {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(into) != nil || *into < lo || *into > hi {
			return &AgentsFileError{Path: path, Line: n.Line, Msg: fmt.Sprintf("team %q: %s %q: want an integer from %d to %d", name, field, n.Value, lo, hi)}
		}
		return nil
	}
	// agent reads a field that names an agent, and remembers where.
	agent := func(n *yaml.Node, field string, into *string) error {
		s, err := str(n, field)
		if err == nil {
			*into = s
			t.lines[field] = n.Line
		}
		return err
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i < len(v.Content); i += 2 {
		fk, fv := v.Content[i], v.Content[i+1]
		if seen[fk.Value] != nil {
			return fail(fk.Line, "team %q: field %q is given twice", name, fk.Value)
		}
		seen[fk.Value] = fk
		var err error
		switch fk.Value {
		case "description":
			t.Description, err = str(fv, fk.Value)
		case "system_prompt":
			t.SystemPrompt, err = str(fv, fk.Value)
		case "pattern":
			if t.Pattern, err = str(fv, fk.Value); err == nil && !slices.Contains(actors.TeamPatterns, t.Pattern) {
				return fail(fv.Line, "team %q: unknown pattern %q: want %s", name, t.Pattern, strings.Join(actors.TeamPatterns, ", "))
			}
		case "members":
			if fv.Kind != yaml.SequenceNode || len(fv.Content) == 0 {
				return fail(fv.Line, "team %q: members: want a list of the file's agents, with at least one", name)
			}
			for _, m := range fv.Content {
				s, err := str(m, "members")
				if err != nil {
					return DeclaredTeam{}, err
				}
				if slices.Contains(t.Members, s) {
					return fail(m.Line, "team %q: member %q is listed twice", name, s)
				}
				t.Members = append(t.Members, s)
				t.lines["member "+s] = m.Line
			}
		case "routes":
			if fv.Kind != yaml.SequenceNode {
				return fail(fv.Line, "team %q: routes: want a list of {match: pattern, member: name}", name)
			}
			for j, r := range fv.Content {
				route, err := parseRoute(path, name, j+1, r)
				if err != nil {
					return DeclaredTeam{}, err
				}
				t.Routes = append(t.Routes, route)
				t.lines[fmt.Sprintf("route %d", j+1)] = r.Line
			}
		case "router":
			if t.Router, err = str(fv, fk.Value); err == nil && t.Router != "rules" && t.Router != "model" {
				return fail(fv.Line, "team %q: router %q: want rules (the routes, then the fallback) or model (the routes, then the team's model)", name, t.Router)
			}
		case "fallback":
			err = agent(fv, "fallback", &t.Fallback)
		case "aggregator":
			err = agent(fv, "aggregator", &t.Aggregator)
		case "judge":
			err = agent(fv, "judge", &t.Judge)
		case "check":
			err = t.parseCheck(path, fv)
		case "redispatch":
			err = num(fv, fk.Value, 0, actors.MaxTeamRedispatch, &t.Redispatch)
		case "rounds":
			err = num(fv, fk.Value, 1, actors.MaxTeamRounds, &t.Rounds)
		case "max_handoffs":
			err = num(fv, fk.Value, 1, actors.MaxTeamHandoffs, &t.MaxHandoffs)
		case "max_steps":
			err = num(fv, fk.Value, 1, maxMaxSteps, &t.MaxSteps)
		case "max_tokens", "max_cost_usd", "max_subagents":
			var stops DeclaredAgent
			if err = parseStopField(path, fmt.Sprintf("team %q", name), &stops, fk, fv); err == nil {
				t.MaxTokens = cmp.Or(stops.MaxTokens, t.MaxTokens)
				t.MaxCostUSD = cmp.Or(stops.MaxCostUSD, t.MaxCostUSD)
				t.MaxSubAgents = cmp.Or(stops.MaxSubAgents, t.MaxSubAgents)
			}
		case "context":
			var gatherLine int
			t.contextLine = fk.Line
			if t.Context, gatherLine, err = parseContext(path, fmt.Sprintf("team %q", name), fv); err == nil && gatherLine != 0 {
				return fail(gatherLine, "team %q: context: evidence, recall and notes are an agent's: a team gathers nothing, its members do (set them on its members)", name)
			}
		default:
			if why, ok := notTeamFields[fk.Value]; ok {
				return fail(fk.Line, "team %q: %s is an agent's, not a team's: %s (set it on its members)", name, fk.Value, why)
			}
			return fail(fk.Line, "team %q: unknown field %q: the fields are %s", name, fk.Value, strings.Join(teamFieldNames, ", "))
		}
		if err != nil {
			return DeclaredTeam{}, err
		}
	}
	switch {
	case t.Pattern == "":
		return fail(k.Line, "team %q: no pattern: want %s", name, strings.Join(actors.TeamPatterns, ", "))
	case t.Members == nil:
		return fail(k.Line, "team %q: no members: want a list of the file's agents", name)
	}
	for field, pattern := range patternFields {
		if fk := seen[field]; fk != nil && pattern != t.Pattern {
			return fail(fk.Line, "team %q: %s is a setting of the %s pattern, not of %s", name, field, pattern, t.Pattern)
		}
	}
	switch {
	case t.Pattern == actors.TeamOrchestrator && t.Fallback == "":
		return fail(k.Line, "team %q: an orchestrator needs a fallback: the member a task goes to when no route decides", name)
	case t.Pattern == actors.TeamDebate && t.Judge == "":
		return fail(k.Line, "team %q: a debate needs a judge: the agent that accepts a proposal", name)
	}
	// What actors checks besides (a route's regular expression, a route to a
	// stranger, the fallback among the members, a check's pattern).
	if _, err := actors.NewTeam(t.Team()); err != nil {
		return fail(k.Line, "team %q: %s", name, strings.TrimPrefix(err.Error(), "team: "))
	}
	return t, nil
}

func parseRoute(path, team string, n int, r *yaml.Node) (DeclaredRoute, error) {
	fail := func(line int, format string, args ...any) (DeclaredRoute, error) {
		return DeclaredRoute{}, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if r.Kind != yaml.MappingNode {
		return fail(r.Line, "team %q: route %d: want {match: pattern, member: name}", team, n)
	}
	var route DeclaredRoute
	seen := map[string]bool{}
	for i := 0; i < len(r.Content); i += 2 {
		fk, fv := r.Content[i], r.Content[i+1]
		if seen[fk.Value] {
			return fail(fk.Line, "team %q: route %d: field %q is given twice", team, n, fk.Value)
		}
		seen[fk.Value] = true
		if fv.Kind != yaml.ScalarNode || fv.Tag == "!!null" || fv.Value == "" {
			return fail(fv.Line, "team %q: route %d: %s: want a non-empty string", team, n, fk.Value)
		}
		switch fk.Value {
		case "match":
			route.Match = fv.Value
		case "member":
			route.Member = fv.Value
		default:
			return fail(fk.Line, "team %q: route %d: unknown field %q: the fields are match, member", team, n, fk.Value)
		}
	}
	if route.Match == "" || route.Member == "" {
		return fail(r.Line, "team %q: route %d: want both match and member", team, n)
	}
	return route, nil
}

// parseCheck reads an orchestrator's check: non_empty, {regex: pattern} or
// {critic: agent}.
func (t *DeclaredTeam) parseCheck(path string, n *yaml.Node) error {
	bad := &AgentsFileError{Path: path, Line: n.Line, Msg: fmt.Sprintf("team %q: check: want non_empty, {regex: pattern} or {critic: agent}", t.Name)}
	switch {
	case n.Kind == yaml.ScalarNode && n.Value == "non_empty":
		t.Check, t.check = "non_empty", actors.TeamCheck{NonEmpty: true}
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[1].Kind == yaml.ScalarNode && n.Content[1].Tag != "!!null" && n.Content[1].Value != "":
		v := n.Content[1].Value
		switch n.Content[0].Value {
		case "regex":
			t.Check, t.check = "regex: "+v, actors.TeamCheck{Regex: v}
		case "critic":
			t.Check, t.check = "critic: "+v, actors.TeamCheck{Critic: v}
			t.lines["critic"] = n.Content[1].Line
		default:
			return bad
		}
	default:
		return bad
	}
	return nil
}

// checkTeams checks what a team names against the file's agents: its members, its
// fallback, aggregator, judge and critic must be agents (not teams), each error
// with its line.
func (f AgentsFile) checkTeams() error {
	isAgent := func(n string) bool { _, ok := f.Lookup(n); return ok }
	for _, t := range f.Teams {
		if isAgent(t.Name) {
			return &AgentsFileError{Path: f.Path, Line: t.Line, Msg: fmt.Sprintf("team %q is named like an agent of the file: a task names either", t.Name)}
		}
		check := func(line int, field, name string) error {
			if isAgent(name) {
				return nil
			}
			what := "an agent"
			if _, team := f.LookupTeam(name); team {
				what = "an agent, not a team"
			}
			return &AgentsFileError{Path: f.Path, Line: line,
				Msg: fmt.Sprintf("team %q: %s %q: want %s of the file (%s)", t.Name, field, name, what, strings.Join(f.agentNames(), ", "))}
		}
		for _, m := range t.Members {
			if err := check(t.lines["member "+m], "member", m); err != nil {
				return err
			}
		}
		for _, n := range []struct{ field, name string }{{"aggregator", t.Aggregator}, {"judge", t.Judge}, {"critic", t.check.Critic}} {
			if n.name != "" {
				if err := check(t.lines[n.field], n.field, n.name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (f AgentsFile) agentNames() []string {
	names := make([]string, len(f.Agents))
	for i, a := range f.Agents {
		names[i] = a.Name
	}
	return names
}

// LookupTeam returns the team called name.
func (f AgentsFile) LookupTeam(name string) (DeclaredTeam, bool) {
	i := slices.IndexFunc(f.Teams, func(t DeclaredTeam) bool { return t.Name == name })
	if i < 0 {
		return DeclaredTeam{}, false
	}
	return f.Teams[i], true
}

// Has reports whether a task may name name: one of the file's agents or teams.
func (f AgentsFile) Has(name string) bool {
	_, agent := f.Lookup(name)
	_, team := f.LookupTeam(name)
	return agent || team
}
