//go:build review

package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
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
// It fails: the delegate tool's description and schema list the node's agents,
// and a task records its agent's tool names (rules 7) but not what the delegate
// tool says of the others, so the call goes out with a prompt other than the one
// whose hash the log holds, and verify diverges at the first model request.
func TestAGrownAgentsFileKeepsTheRecordedPrompt(t *testing.T) {
	dir := t.TempDir()
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := &namedModel{name: "model-a", hold: held}
	n1, err := node.New(context.Background(), node.Config{Model: first, DataDir: dir, HandoffGrace: heldCallGrace, Agents: delegatingAgents(false)})
	if err != nil {
		t.Fatal(err)
	}
	stop1, err := n1.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
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
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify with the grown agents: %v %v", div, err)
	}
}

// A plan_execute session recorded before its node's agents file gained an agent
// verifies with the file as it is now: its planner was offered the agents of then.
//
// It fails: the planner's prompt lists the node's agents a step may name (and the
// delegate tool's description does too), from the node's agents now.
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
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify (agents file grown: %v): %v %v", grown, div, err)
		}
	}
}
