package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// The agents of a node, and the same with one more (an agents file that grew).
func delegatingAgents(grown bool) []node.NamedAgent {
	agents := []node.NamedAgent{
		{Name: "lead", SystemPrompt: "You delegate.", Tools: []string{node.DelegateTool}},
		{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{"calculator", node.DelegateTool}},
		{Name: "helper", Description: "computes", Tools: []string{"calculator"}},
	}
	if grown {
		agents = append(agents, node.NamedAgent{Name: "writer", Description: "writes prose", Tools: []string{"clock"}})
	}
	return agents
}

// A node stopped while a delegating agent's model call is in flight, restarted
// with one more agent in its agents file (nothing changed of the agent's own
// configuration): the call is made again as its model.requested recorded it (the
// same prompt), and the session verifies with the agents it now runs.
//
// From decision rules 10 the task records its agent's roster (the agents the
// delegate tool lists) with its configuration, and renders the tool from it: under
// older rules the delegate tool's description and schema listed the node's agents
// now, so the call went out with a prompt other than the one whose hash the log
// holds, and verify diverged at the first model request.
func TestAGrownAgentsFileKeepsTheRecordedPrompt(t *testing.T) {
	dir := t.TempDir()
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := &namedModel{name: "model-a", hold: held}
	_, stop1 := startWithTask(t, node.Config{Model: first, DataDir: dir, HandoffGrace: heldCallGrace, Agents: delegatingAgents(false)}, node.Task{Input: "hello", SessionID: "s", Agent: "lead"})
	waitFor(t, 10*time.Second, "the model call", func() bool { return len(first.requests()) == 1 })
	stop1()

	again := &namedModel{name: "model-a"}
	cfg := node.Config{Model: again, DataDir: dir, Agents: delegatingAgents(true)}
	n2 := nodetest.Start(t, cfg)
	events := tasksEnded(t, n2, "s", 1)
	requested := payloads[*messages.ModelRequested](t, events)
	reissued := again.requests()
	if len(requested) != 1 || len(reissued) != 1 {
		t.Fatalf("model requests %d, calls made again %d; want 1 and 1", len(requested), len(reissued))
	}
	if got := llm.PromptHash(reissued[0]); got != requested[0].PromptHash {
		t.Errorf("the call in flight was made again with prompt %s; its model.requested recorded %s", got, requested[0].PromptHash)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := verifyAsReplayDoes(n2.Log(), all, events); err != nil || div != nil {
		t.Errorf("verify with the grown agents: %v %v", div, err)
	}
}

// verifyAsReplayDoes verifies a session's events with agents as replay verify
// does: with the configurations its tasks recorded, read from the log.
func verifyAsReplayDoes(log eventlog.Log, all actors.Agents, events []messages.Envelope) (*actors.Divergence, error) {
	configs, err := actors.LoadConfigs(context.Background(), log, actors.NamedConfigs(events))
	if err != nil {
		return nil, err
	}
	return actors.VerifyRecorded(all, events, 1, configs)
}

// A plan_execute session recorded before its node's agents file gained an agent
// verifies with the file as it is now: its planner was offered the agents of then.
//
// Under rules 9 it did not: the planner's prompt listed the node's agents a step
// may name (and the delegate tool's description did too), from the node's agents
// now (TestAGrownAgentsFileChangesPromptsUnderRules9).
func TestAPlanVerifiesAfterTheAgentsFileGrew(t *testing.T) {
	plan := `{"steps":[{"id":"a","goal":"add","tool":"calculator","args":{"expression":"2+3"},"deps":[]},` +
		`{"id":"b","goal":"check","agent":"helper","deps":["a"]}],"answer":"say it"}`
	m := newByAgent(t, map[string][]llm.ScriptStep{"planner": {{Content: plan}, {Content: "5, checked"}}, "helper": {{Content: "right"}}})
	n := nodetest.Start(t, node.Config{Model: m, Agents: delegatingAgents(false)})
	events := runAgentTask(t, n, node.Task{Input: "2+3?", SessionID: "p", Agent: "planner"})
	if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != "5, checked" {
		t.Fatalf("the task's end: %+v", events[len(events)-1])
	}
	for _, grown := range []bool{false, true} {
		all, err := node.Config{Model: m, Agents: delegatingAgents(grown)}.AllAgents()
		if err != nil {
			t.Fatal(err)
		}
		if div, err := verifyAsReplayDoes(n.Log(), all, events); err != nil || div != nil {
			t.Errorf("verify (agents file grown: %v): %v %v", grown, div, err)
		}
	}
}

// Under decision rules 9 (a node pinned to them) nothing changed: a task records
// no roster with its configuration (its digest is a rules 9 build's), and its
// prompts are rendered from the node's agents now, so a plan_execute session
// verifies with the agents it ran with and diverges at its first model request
// once the agents file grew, as rules 9 decide.
func TestAGrownAgentsFileChangesPromptsUnderRules9(t *testing.T) {
	plan := `{"steps":[{"id":"a","goal":"add","tool":"calculator","args":{"expression":"2+3"},"deps":[]},` +
		`{"id":"b","goal":"check","agent":"helper","deps":["a"]}],"answer":"say it"}`
	m := newByAgent(t, map[string][]llm.ScriptStep{"planner": {{Content: plan}, {Content: "5, checked"}}, "helper": {{Content: "right"}}})
	n := nodetest.Start(t, node.Config{Model: m, Agents: delegatingAgents(false), DecisionRules: 9})
	events := runAgentTask(t, n, node.Task{Input: "2+3?", SessionID: "p9", Agent: "planner"})
	if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != "5, checked" {
		t.Fatalf("the task's end: %+v", events[len(events)-1])
	}
	if task := payloads[*messages.TaskSubmitted](t, events)[0]; task.Rules != 9 {
		t.Fatalf("the task recorded rules %d, want 9", task.Rules)
	}
	configs, err := actors.LoadConfigs(context.Background(), n.Log(), actors.NamedConfigs(events))
	if err != nil || len(configs) != 1 {
		t.Fatalf("the recorded configurations: %v %v", configs, err)
	}
	for d, c := range configs {
		if c.Roster != nil || c.Members != nil || c.CriticPrompt != "" {
			t.Errorf("configuration %s recorded under rules 9 holds a roster: %+v", d, c)
		}
	}
	for _, grown := range []bool{false, true} {
		all, err := node.Config{Model: m, Agents: delegatingAgents(grown)}.AllAgents()
		if err != nil {
			t.Fatal(err)
		}
		div, err := verifyAsReplayDoes(n.Log(), all, events)
		if err != nil || (div != nil) != grown || grown && div.Seq != 2 {
			t.Errorf("verify (agents file grown: %v): %v %v; want a divergence at seq 2 only when grown", grown, div, err)
		}
	}
}

// A team's routing prompt describes its members (their descriptions and tools),
// and a reflection's critique sends its critic's rubric: from rules 10 a task
// records them with its configuration, so a session verifies after a member's
// description, or the critic's rubric, was edited (and the agents file grew).
func TestATeamAndACriticKeepTheirRecordedPrompts(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"desk":   {{Content: `{"member": "math", "reason": "the task is arithmetic"}`}},
		"math":   {{Content: "144"}},
		"critic": {{Content: "a draft"}, {Content: `{"verdict": "pass"}`}},
	})
	agents := func(edited bool) []node.NamedAgent {
		desc, rubric := "does arithmetic", "Check the numbers."
		if edited {
			desc, rubric = "does sums and products", "Check the spelling."
		}
		out := []node.NamedAgent{
			{Name: "math", Description: desc, Tools: []string{"calculator"}}, {Name: "prose", Description: "writes", Tools: []string{}},
			{Name: "desk", Team: &actors.Team{Pattern: actors.TeamOrchestrator, Members: []actors.TeamMember{{Name: "math"}, {Name: "prose"}},
				ModelRouting: true, Fallback: "prose"}},
			{Name: "critic", Paradigm: node.ParadigmReflection, CriticPrompt: rubric, Tools: []string{}},
		}
		if edited {
			out = append(out, node.NamedAgent{Name: "writer", Description: "writes prose", Tools: []string{"clock"}})
		}
		return out
	}
	n := nodetest.Start(t, node.Config{Model: model, Agents: agents(false)})
	for _, c := range []struct{ agent, want string }{{"desk", "144"}, {"critic", "a draft"}} {
		events := runAgentTask(t, n, node.Task{Input: "What is 12 * 12?", SessionID: "s-" + c.agent, Agent: c.agent})
		if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != c.want {
			t.Fatalf("%s: the task's end: %+v", c.agent, events[len(events)-1])
		}
		for _, edited := range []bool{false, true} {
			all, err := node.Config{Model: model, Agents: agents(edited)}.AllAgents()
			if err != nil {
				t.Fatal(err)
			}
			if div, err := verifyAsReplayDoes(n.Log(), all, events); err != nil || div != nil {
				t.Errorf("verify %s (edited: %v): %v %v", c.agent, edited, div, err)
			}
		}
	}
}

// The default agent of a node whose tools are disclosed (the catalog strategy)
// is offered the delegate tool through its disclosure: from rules 10 as its task
// recorded its roster, so its session verifies after the agents file grew.
func TestADisclosedDelegateToolKeepsTheRecordedRoster(t *testing.T) {
	m := newByAgent(t, map[string][]llm.ScriptStep{"default": {{Content: "hi"}}})
	cfg := func(grown bool) node.Config {
		return node.Config{Model: m, Disclosure: disclosure.Catalog, Agents: delegatingAgents(grown)}
	}
	n := nodetest.Start(t, cfg(false))
	events := runAgentTask(t, n, node.Task{Input: "hello", SessionID: "d"})
	requested := payloads[*messages.ModelRequested](t, events)
	if len(requested) != 1 || !slices.Contains(requested[0].Tools, node.DelegateTool) {
		t.Fatalf("model requests %+v; want one offering %s", requested, node.DelegateTool)
	}
	for _, grown := range []bool{false, true} {
		all, err := cfg(grown).AllAgents()
		if err != nil {
			t.Fatal(err)
		}
		if div, err := verifyAsReplayDoes(n.Log(), all, events); err != nil || div != nil {
			t.Errorf("verify (agents file grown: %v): %v %v", grown, div, err)
		}
	}
}
