package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// teamChildren returns the child sessions of a team's delegate calls, with the
// member each ran, in the order the calls were requested.
func teamChildren(t *testing.T, events []messages.Envelope) (ids, members []string) {
	t.Helper()
	for _, e := range events {
		if e.Type != messages.TypeToolCallRequested {
			continue
		}
		p, _ := e.Decode()
		r := p.(*messages.ToolCallRequested)
		var args struct{ Agent string }
		if r.Tool != node.DelegateTool || json.Unmarshal([]byte(r.Arguments), &args) != nil {
			t.Fatalf("the team made a call that is no delegation: %+v", r)
		}
		ids = append(ids, node.ChildSessionID(messages.EffectKey{SessionID: e.SessionID, Seq: e.Seq}))
		members = append(members, r.Purpose+"→"+args.Agent)
	}
	return ids, members
}

// Every team of examples/teams.yaml runs on a node with the offline model, each
// member in a child session whose task records its parent; the team's session and
// its members' verify as deterministic against the file.
func TestTeamsOfTheExamplesRunOnANode(t *testing.T) {
	file, err := nodeconfig.LoadAgents(filepath.Join("..", "examples", "teams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Model: llm.Offline{}, Agents: file.NodeAgents()}
	n := nodetest.Start(t, cfg)
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ team, input, output, calls string }{
		{"desk", "What is 12 * (7 + 5)?", "144", "work→calculator"},
		{"desk", "Write a haiku about tea", "I am Troupe's offline model", "work→writer"},
		{"compute_then_write", "What is 12 * (7 + 5)?", "144", "stage→calculator stage→writer"},
		{"panel", "What is 12 * (7 + 5)?", "calculator: 144\nchecker: 144", "branch→calculator branch→checker aggregate→writer"},
		{"review", "What is 12 * (7 + 5)?", "144", "propose→calculator propose→checker judge→judge"},
		{"frontdesk", "What is 12 * (7 + 5)?", "144", "handoff→writer handoff→calculator"},
	} {
		session := c.team + "-" + strings.Fields(c.input)[0]
		res, err := n.RunTask(context.Background(), node.Task{Input: c.input, SessionID: session, Agent: c.team})
		if err != nil || res.Status != messages.StatusCompleted || !strings.HasPrefix(res.Output, c.output) {
			t.Errorf("%s: %+v %v; want it completed with %q", c.team, res, err, c.output)
			continue
		}
		events := readAll(t, n.Log(), session)
		ids, calls := teamChildren(t, events)
		if got := strings.Join(calls, " "); got != c.calls {
			t.Errorf("%s: delegations %s; want %s", c.team, got, c.calls)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", session, div, err)
		}
		for _, id := range ids {
			child := readAll(t, n.Log(), id)
			tasks := payloads[*messages.TaskSubmitted](t, child)
			if len(tasks) != 1 || tasks[0].Parent == nil || tasks[0].Parent.SessionID != session || !strings.Contains(tasks[0].Input, llm.TeamBrief) {
				t.Errorf("%s: child %s's task %+v does not record its parent and brief", c.team, id, tasks)
			}
			if div, err := actors.VerifyAmong(all, child); err != nil || div != nil {
				t.Errorf("verify %s: %v %v", id, div, err)
			}
		}
	}
}

// A node killed during a fan-out: the next node on the same log resumes the team's
// session, and the branch that finished is not performed again (its member's model
// is not called, its child session gets no second task), while the branch in
// flight is performed again under its key and finds its child session.
func TestTeamFanOutSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	var tallies sync.Map // by key: how many times the tool was performed
	tally := tools.MustFunc("tally", "Counts.", func(ctx context.Context, _ struct{}) (string, error) {
		v, _ := tallies.LoadOrStore(tools.CallKey(ctx), new(int))
		*v.(*int)++
		return "counted", nil
	})
	scripts := map[string][]llm.ScriptStep{
		"fast": {{ToolCalls: []messages.ToolCall{{ID: "t1", Name: "tally", Arguments: `{}`}}}, {Content: "fast tallied"}},
		"slow": {{ToolCalls: []messages.ToolCall{{ID: "t1", Name: "tally", Arguments: `{}`}}}, {Content: "slow tallied"}},
		"agg":  {{Content: "both tallied"}},
	}
	config := func(model llm.Model) node.Config {
		return node.Config{Model: model, DataDir: dir, Tools: []tools.Tool{tools.Calculator{}, tally}, Agents: []node.NamedAgent{
			{Name: "fast", Tools: []string{"tally"}}, {Name: "slow", Tools: []string{"tally"}}, {Name: "agg", Tools: []string{}},
			{Name: "panel", Team: &actors.Team{Pattern: actors.TeamFanOut, Members: []actors.TeamMember{{Name: "fast"}, {Name: "slow"}}, Aggregator: "agg"}},
		}}
	}
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := newByAgent(t, scripts)
	first.hold = func(agent string, step int) <-chan struct{} {
		if agent == "slow" && step == 2 {
			return held // the slow branch's answer never comes on the first node
		}
		return nil
	}
	cfg1 := config(first)
	cfg1.HandoffGrace = heldCallGrace // slow's second model call never answers on the first node
	n1, stop1 := startWithTask(t, cfg1, node.Task{Input: "tally", SessionID: "team", Agent: "panel"})
	// The fast branch's answer is recorded (the team's state takes it once the
	// slow one's is in too: decision rules 15).
	waitFor(t, 10*time.Second, "the fast branch's answer, the slow one's second model call", func() bool {
		return first.callsOf("slow") >= 2 && len(payloads[*messages.ToolCallCompleted](t, readAll(t, n1.Log(), "team"))) > 0
	})
	stop1() // as a kill: nothing records the calls in flight

	second := newByAgent(t, scripts)
	n2 := nodetest.Start(t, config(second))
	var events []messages.Envelope
	waitFor(t, 10*time.Second, "the team's task to end", func() bool {
		events = readAll(t, n2.Log(), "team")
		return allTasksEnded(events)
	})
	if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != "both tallied" {
		t.Fatalf("the team's end: %+v", events[len(events)-1])
	}
	ids, calls := teamChildren(t, events)
	if strings.Join(calls, " ") != "branch→fast branch→slow aggregate→agg" {
		t.Fatalf("delegations: %v", calls)
	}
	for _, id := range ids {
		if tasks := payloads[*messages.TaskSubmitted](t, readAll(t, n2.Log(), id)); len(tasks) != 1 {
			t.Errorf("child %s has %d tasks, want 1", id, len(tasks))
		}
	}
	count := 0
	tallies.Range(func(_, v any) bool { count += *v.(*int); return true })
	if count != 2 || second.callsOf("fast") != 0 || second.callsOf("slow") != 1 || second.callsOf("agg") != 1 {
		t.Errorf("after the restart: tally performed %d times in all, the models of fast, slow and agg called %d, %d and %d times; want 2, 0, 1 and 1",
			count, second.callsOf("fast"), second.callsOf("slow"), second.callsOf("agg"))
	}
	all, err := config(second).AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %v %v", div, err)
	}
}

// A team needs the delegate tool, which a node has with named agents; its members
// must be agents of the node, not teams.
func TestTeamConfigurationErrors(t *testing.T) {
	for name, c := range map[string]struct {
		agents []node.NamedAgent
		want   string
	}{
		"stranger": {[]node.NamedAgent{{Name: "a"}, {Name: "t", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "zed"}}}}},
			`team "t": member "zed" is no agent of the node`},
		"team member": {[]node.NamedAgent{{Name: "a"}, {Name: "u", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "a"}}}},
			{Name: "t", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "u"}}}}}, `member "u" is no agent of the node`},
		"judge": {[]node.NamedAgent{{Name: "a"}, {Name: "t", Team: &actors.Team{Pattern: actors.TeamDebate, Members: []actors.TeamMember{{Name: "a"}}, Judge: "j"}}},
			`judge "j" is no agent`},
		"tools": {[]node.NamedAgent{{Name: "a"}, {Name: "t", Tools: []string{}, Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "a"}}}}},
			"no paradigm nor tools of its own"},
	} {
		cfg := node.Config{Model: llm.Offline{}, DataDir: t.TempDir(), Agents: c.agents}
		_, err := cfg.AllAgents()
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// A team whose prompts cannot fit their windows is refused when the node starts,
// as an agent's are: a member's (an agent of the node, whose error names its
// team too), and the team's own, its system prompt with the delegate tool's
// schema, which its routing calls send. A team that fits starts as before.
func TestTeamWhosePromptCannotFitIsRefusedAtStart(t *testing.T) {
	long := strings.Repeat("Be careful and thorough. ", 400) // about 2,000 tokens
	team := func(prompt string) node.NamedAgent {
		return node.NamedAgent{Name: "crew", SystemPrompt: prompt, Team: &actors.Team{Pattern: actors.TeamPipeline,
			Members: []actors.TeamMember{{Name: "first"}, {Name: "second"}}}}
	}
	small := actors.ContextOptions{Window: 2048, ReservedOutput: 512}
	for _, c := range []struct {
		name string
		cfg  node.Config
		want string
	}{
		{"member", node.Config{Agents: []node.NamedAgent{{Name: "first"}, {Name: "second", SystemPrompt: long, Context: small}, team("")}},
			`agent "second", a member of team "crew": its system prompt is `},
		{"team", node.Config{Context: small, Agents: []node.NamedAgent{{Name: "first"}, {Name: "second"}, team(long)}},
			`team "crew": its system prompt is `},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := node.New(context.Background(), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "leaves no room for a task") {
			t.Errorf("%s: %v, want it refused for its prompt (%q)", c.name, err, c.want)
		}
	}
	// The same team, its prompts within their windows, starts.
	n, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Context: small,
		Agents: []node.NamedAgent{{Name: "first"}, {Name: "second", SystemPrompt: "Check the facts."}, team("Share the work.")}})
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
}

// A team's own context settings (NamedAgent.Context: window, reserved output,
// history, compression) bound its routing calls, each field it leaves zero the
// default agent's; a team without any takes the default agent's. A team gathers
// nothing, so a gathering number on it is refused.
func TestTeamTakesItsOwnContext(t *testing.T) {
	crew := func(name string, ctx actors.ContextOptions) node.NamedAgent {
		return node.NamedAgent{Name: name, Context: ctx, Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "a"}}}}
	}
	def := actors.ContextOptions{Window: 16000, ReservedOutput: 1000, HistoryTurns: 30}
	own := actors.ContextOptions{Window: 4096, HistoryTurns: 7, Compression: actors.Compression{Strategy: "window", Window: 4}}
	cfg := node.Config{Model: llm.Offline{}, Context: def, Agents: []node.NamedAgent{{Name: "a"}, crew("own", own), crew("plain", actors.ContextOptions{})}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	got := all.Named["own"].Context
	if got.Window != 4096 || got.ReservedOutput != 1000 || got.HistoryTurns != 7 || got.Compression.Strategy != "window" || got.Compression.Window != 4 {
		t.Errorf("team with its own context: %+v; want window 4096, the default's reserved output 1000, history 7, window compression of 4 turns", got)
	}
	if got := all.Named["plain"].Context; got.Window != 16000 || got.ReservedOutput != 1000 || got.HistoryTurns != 30 || got.Compression.Strategy != "" {
		t.Errorf("team without context settings: %+v; want the default agent's %+v", got, def)
	}
	for name, c := range map[string]struct {
		ctx  actors.ContextOptions
		want string
	}{
		"gathers":      {actors.ContextOptions{Recall: 3}, `team "bad": context evidence, recall and notes: a team gathers nothing`},
		"no room":      {actors.ContextOptions{Window: 900}, `team "bad", with the default agent's context settings: context reserved output 1000`},
		"out of range": {actors.ContextOptions{Window: 100}, `team "bad": context window 100 is out of range`},
	} {
		bad := node.Config{Model: llm.Offline{}, DataDir: t.TempDir(), Context: def, Agents: []node.NamedAgent{{Name: "a"}, crew("bad", c.ctx)}}
		if _, err := node.New(context.Background(), bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// A team's own budgets (NamedAgent.MaxTokens, MaxCostUSD) are its task's, each it
// leaves zero the default agent's: they bound its own model calls (the agent the
// node builds for it) and, as an agent's budget covers its sub-agents, its
// members' work: a pipeline's second stage is handed what the first left of the
// team's 5000 tokens (1000), not of the default agent's 100,000, and stops when it
// has spent them. The team's budget spent, its task ends with token_budget (from
// decision rules 3; member_failed before), the stage's failure kept in the team's
// state and on its delegate call.
func TestTeamTakesItsOwnBudgets(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"first": {{Content: "draft", Usage: promptTokens(4000)}},
		"second": {{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: promptTokens(3000)},
			{Content: "never asked", Usage: promptTokens(3000)}},
	})
	crew := func(name string, tokens int, usd float64) node.NamedAgent {
		return node.NamedAgent{Name: name, MaxTokens: tokens, MaxCostUSD: usd,
			Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "first"}, {Name: "second"}}}}
	}
	cfg := node.Config{Model: model, MaxTokens: 100_000, MaxCostUSD: 5, Agents: []node.NamedAgent{
		{Name: "first", SystemPrompt: "You draft."}, {Name: "second", SystemPrompt: "You finish.", Tools: []string{"calculator"}},
		crew("crew", 5000, 0.25), crew("plain", 0, 0)}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if a := all.Named["crew"]; a.MaxTokens != 5000 || a.MaxCostUSD != 0.25 {
		t.Errorf("team with its own budgets: %d tokens, $%g; want 5000 and $0.25", a.MaxTokens, a.MaxCostUSD)
	}
	if a := all.Named["plain"]; a.MaxTokens != 100_000 || a.MaxCostUSD != 5 {
		t.Errorf("team without budgets: %d tokens, $%g; want the default agent's 100000 and $5", a.MaxTokens, a.MaxCostUSD)
	}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "Draft, then finish.", SessionID: "crew-budget", Agent: "crew"})
	ids, calls := teamChildren(t, events)
	if got := strings.Join(calls, " "); got != "stage→first stage→second" {
		t.Fatalf("delegations %s", got)
	}
	second, secondEvents := childTask(t, n, ids[1])
	if second.MaxTokens != 1000 {
		t.Errorf("the second stage's budget: %d tokens; want the 1000 left of the team's 5000", second.MaxTokens)
	}
	if f := payloads[*messages.TaskFailed](t, secondEvents); len(f) != 1 || f[0].Reason != messages.ReasonTokenBudget {
		t.Errorf("the second stage's end: %+v; want it stopped by its token budget", f)
	}
	if f := payloads[*messages.TaskFailed](t, events); len(f) != 1 || f[0].Reason != messages.ReasonTokenBudget || f[0].SubAgentsUsage != promptTokens(7000) ||
		f[0].Error != "stopped: the task used 7000 tokens (0 prompt + 0 completion of its own, 7000 by its sub-agents) without a final answer; its budget is 5000" {
		t.Errorf("the team's end: %+v; want token_budget, its members' 7000 tokens counted", f)
	}
	// The stage's failure is still recorded: its delegate call's error and its
	// answer in the team's state.
	done := payloads[*messages.ToolCallCompleted](t, events)
	if len(done) != 2 || !strings.Contains(done[1].Error, "token_budget") {
		t.Errorf("the second stage's delegate call: %+v; want its token_budget failure", done)
	}
	var recorded bool
	for _, u := range payloads[*messages.TeamStateUpdated](t, events) {
		recorded = recorded || u.Section == "second" && strings.HasPrefix(u.Value, "(failed) ") && strings.Contains(u.Value, "token_budget")
	}
	if !recorded {
		t.Errorf("the team's state does not record the second stage's failure")
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}

// A team has no loop detection nor approvals of its own (its hand-overs are its
// pattern's, not a model's tool calls, and wait for no approval): setting them on
// a team is refused, naming the team, as is a budget out of range.
func TestTeamRefusesAnAgentsOwnSettings(t *testing.T) {
	for name, c := range map[string]struct {
		set  func(*node.NamedAgent)
		want string
	}{
		"loop repeats":     {func(a *node.NamedAgent) { a.LoopRepeats = 5 }, `team "bad": loop_repeats 5, loop_stale_steps 0: loop detection judges a model's tool calls`},
		"loop stale steps": {func(a *node.NamedAgent) { a.LoopStaleSteps = actors.LoopOff }, `team "bad": loop_repeats 0, loop_stale_steps -1`},
		"approval timeout": {func(a *node.NamedAgent) { a.ApprovalTimeout = time.Minute }, `team "bad": approvals [], approval timeout 1m0s: a team's hand-overs wait for no approval`},
		"max tokens":       {func(a *node.NamedAgent) { a.MaxTokens = node.MaxTokenBudget + 1 }, `team "bad": max_tokens must be between 0 and`},
		"max cost":         {func(a *node.NamedAgent) { a.MaxCostUSD = -1 }, `team "bad": max_cost_usd must be between 0 and`},
	} {
		bad := node.NamedAgent{Name: "bad", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "a"}}}}
		c.set(&bad)
		cfg := node.Config{Model: llm.Offline{}, DataDir: t.TempDir(), Agents: []node.NamedAgent{{Name: "a"}, bad}}
		if _, err := node.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// A team whose budget its members spent starts no other member: a fan-out whose
// branches spent 6000 of its 5000 tokens ends with token_budget, saying what they
// spent, and its aggregator's child session never starts (before decision rules 3
// its delegate call was made, refused at once, and the team failed with
// member_failed). The session verifies.
func TestTeamWhoseBudgetIsSpentStartsNoMoreMembers(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"first":  {{Content: "A", Usage: promptTokens(3000)}},
		"second": {{Content: "B", Usage: promptTokens(3000)}},
		"agg":    {{Content: "never asked"}},
	})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "first", SystemPrompt: "You answer."}, {Name: "second", SystemPrompt: "You answer."}, {Name: "agg", SystemPrompt: "You combine."},
		{Name: "panel", MaxTokens: 5000, Team: &actors.Team{Pattern: actors.TeamFanOut,
			Members: []actors.TeamMember{{Name: "first"}, {Name: "second"}}, Aggregator: "agg"}}}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "Ideas, please.", SessionID: "panel-budget", Agent: "panel"})
	if _, calls := teamChildren(t, events); strings.Join(calls, " ") != "branch→first branch→second" {
		t.Fatalf("delegations %s; want the branches only", strings.Join(calls, " "))
	}
	f := payloads[*messages.TaskFailed](t, events)
	if len(f) != 1 || f[0].Reason != messages.ReasonTokenBudget || f[0].SubAgentsUsage != promptTokens(6000) ||
		f[0].Error != "stopped: the task used 6000 tokens (0 prompt + 0 completion of its own, 6000 by its sub-agents) without a final answer; its budget is 5000" {
		t.Fatalf("the team's end: %+v; want token_budget, its members' 6000 tokens counted", f)
	}
	if task := payloads[*messages.TaskSubmitted](t, events); len(task) != 1 || task[0].Rules != actors.ContextRules {
		t.Errorf("the team's task: %+v; want it recorded under rules %d", task, actors.ContextRules)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}

// A team's member answer comes back whole up to MaxTeamMemberResult (it is the
// team's work, and here the team's answer), where an agent's own delegate call
// gets MaxDelegateResult: a 20 KiB answer completed a pipeline with its 8 KiB head.
func TestTeamMemberAnswerIsNotCutAtTheDelegateBound(t *testing.T) {
	long := strings.Repeat("word ", 4<<10) // 20 KiB
	model := newByAgent(t, map[string][]llm.ScriptStep{"writer": {{Content: long}}})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "writer", SystemPrompt: "You write."},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "writer"}}}}}}
	n := nodetest.Start(t, cfg)
	res, err := n.RunTask(context.Background(), node.Task{Input: "Write at length.", SessionID: "line-long", Agent: "line"})
	if err != nil || res.Status != messages.StatusCompleted || res.Output != long {
		t.Fatalf("the team's answer: %d bytes, status %s, %v; want the member's %d bytes whole", len(res.Output), res.Status, err, len(long))
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, readAll(t, n.Log(), "line-long")); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}

// A member's answer longer than MaxTeamMemberResult is cut in its middle, not at
// its end: the lines that close it with directives (decision rules 8 read the
// team's facts and a handoff only there) are kept after the cut's note, so the
// team still takes its facts and its handoff. Before, the head alone was kept, and
// the team went on without them: a pipeline's state had no facts, a handoff
// team ended with the first member's (cut) answer.
func TestTeamMemberAnswerPastTheBoundKeepsItsDirectives(t *testing.T) {
	long := bigAnswer(300 << 10)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"writer": {{Content: long + "\nSTATE: topic = tides\n\nSTATE: tone = calm\n"}},
		"first":  {{Content: long + "\nSTATE: found = 42\nHANDOFF: second: check it"}},
		// second's task holds first's answer (256 KiB), more than its window: its
		// context condenses it first (a summary call), then it answers.
		"second": {{Content: "first wrote at length"}, {Content: "checked"}},
	})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "writer", SystemPrompt: "You write."}, {Name: "first", SystemPrompt: "You start."}, {Name: "second", SystemPrompt: "You check."},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "writer"}}}},
		{Name: "relay", Team: &actors.Team{Pattern: actors.TeamHandoff, Members: []actors.TeamMember{{Name: "first"}, {Name: "second"}}}}}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, cfg)
	facts := func(events []messages.Envelope) string {
		var f []string
		for _, u := range payloads[*messages.TeamStateUpdated](t, events) {
			if u.Section == messages.TeamSectionGlobal && u.By != "team" {
				f = append(f, u.Key+"="+u.Value+" by "+u.By)
			}
		}
		return strings.Join(f, ", ")
	}
	cutOnce := func(events []messages.Envelope) {
		t.Helper()
		done := payloads[*messages.ToolCallCompleted](t, events)
		if len(done) == 0 {
			t.Fatal("no delegate call completed")
		}
		if r := done[0].Result; len(r) > node.MaxTeamMemberResult || !strings.HasPrefix(r, long[:1<<10]) ||
			!strings.Contains(r, "\n[cut: the sub-agent's answer is ") {
			t.Errorf("the member's recorded result: %d bytes …%.300q; want at most %d, its head and the cut's note", len(r), r[max(len(r)-300, 0):], node.MaxTeamMemberResult)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify: %+v %v", div, err)
		}
	}

	events := runAgentTask(t, n, node.Task{Input: "Write at length.", SessionID: "line-directives", Agent: "line"})
	if got := facts(events); got != "topic=tides by writer, tone=calm by writer" {
		t.Errorf("the team's facts: %q; want the two the writer's answer closed with", got)
	}
	if c := payloads[*messages.TaskCompleted](t, events); len(c) != 1 || !strings.HasSuffix(c[0].Output, "]\nSTATE: topic = tides\n\nSTATE: tone = calm\n") {
		t.Errorf("the team's answer does not close with the writer's directives after the note")
	}
	cutOnce(events)

	events = runAgentTask(t, n, node.Task{Input: "Start, then hand over.", SessionID: "relay-directives", Agent: "relay"})
	if _, calls := teamChildren(t, events); len(calls) != 2 || !strings.HasSuffix(calls[1], "second") {
		t.Errorf("delegations %v; want first, then second by the handoff", calls)
	}
	if c := payloads[*messages.TaskCompleted](t, events); len(c) != 1 || c[0].Output != "checked" {
		t.Errorf("the team's end: %.300s; want second's answer", events[len(events)-1].Payload)
	}
	if got := facts(events); got != "found=42 by first, handoffs=first → second: check it by first" {
		t.Errorf("the team's facts: %q; want the one first's answer closed with, and its handoff", got)
	}
	cutOnce(events)
}

// A node stopped while a pipeline's first stage runs, restarted with the team's
// members changed (its first member taken out of the team): the stage's recorded
// delegate call went to "calc", whom the team no longer has first. The team's task
// fails with unknown_agent naming both, instead of taking calc's answer for
// writer's (recording it in writer's section of the team's state) and completing
// without writer ever running.
func TestTeamChangedAcrossARestartFailsClearly(t *testing.T) {
	dir := t.TempDir()
	scripts := map[string][]llm.ScriptStep{"calc": {{Content: "calc's answer"}}, "writer": {{Content: "writer's answer"}}}
	config := func(model llm.Model, members ...string) node.Config {
		var ms []actors.TeamMember
		for _, m := range members {
			ms = append(ms, actors.TeamMember{Name: m})
		}
		return node.Config{Model: model, DataDir: dir, Agents: []node.NamedAgent{
			{Name: "calc", Tools: []string{"calculator"}}, {Name: "writer", Tools: []string{}},
			{Name: "desk", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: ms}},
		}}
	}
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := newByAgent(t, scripts)
	first.hold = func(agent string, _ int) <-chan struct{} {
		if agent == "calc" {
			return held // the first stage's answer never comes on the first node
		}
		return nil
	}
	cfg1 := config(first, "calc", "writer")
	cfg1.HandoffGrace = heldCallGrace // calc's model call never answers on the first node
	_, stop1 := startWithTask(t, cfg1, node.Task{Input: "do it", SessionID: "team", Agent: "desk"})
	waitFor(t, 10*time.Second, "calc's model call", func() bool { return first.callsOf("calc") >= 1 })
	stop1()

	n2 := nodetest.Start(t, config(newByAgent(t, scripts), "writer"))
	var events []messages.Envelope
	waitFor(t, 10*time.Second, "the team's task to end", func() bool {
		events = readAll(t, n2.Log(), "team")
		return allTasksEnded(events)
	})
	failed := payloads[*messages.TaskFailed](t, events)
	if len(failed) != 1 || failed[0].Reason != messages.ReasonUnknownAgent ||
		!strings.Contains(failed[0].Error, `went to "calc"`) || !strings.Contains(failed[0].Error, `now gives it to "writer"`) {
		t.Fatalf("the team's end: %+v; want unknown_agent naming calc and writer", events[len(events)-1])
	}
	for _, u := range payloads[*messages.TeamStateUpdated](t, events) {
		if u.Section == "writer" || u.By == "writer" {
			t.Errorf("the team's state records %+v for writer, who never ran", u)
		}
	}
}
