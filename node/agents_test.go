package node_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// agentRequests keeps the requests a model gets.
type agentRequests struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (m *agentRequests) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, r)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func (m *agentRequests) take() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.reqs
	m.reqs = nil
	return r
}

// runAgentTask submits t and waits (at most 10 s) for its end; it returns the session's events.
func runAgentTask(t *testing.T, n *node.Node, task node.Task) []messages.Envelope {
	t.Helper()
	live, stop := n.Watch(task.SessionID)
	defer stop()
	if _, err := n.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-live:
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				events, err := n.Log().Read(context.Background(), task.SessionID, 1)
				if err != nil {
					t.Fatal(err)
				}
				return events
			}
		case <-timeout:
			t.Fatalf("session %s: the task did not finish in 10 s", task.SessionID)
		}
	}
}

func agentsConfig(t *testing.T) (node.Config, *agentRequests) {
	t.Helper()
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"2+3"}`}}},
		{Content: "5"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &agentRequests{Model: script}
	return node.Config{Model: rec, Agents: []node.NamedAgent{
		{Name: "calc", SystemPrompt: "You only compute.", Tools: []string{"calculator"}},
		{Name: "brief", SystemPrompt: "You stop early.", Tools: []string{}, MaxSteps: 1},
	}}, rec
}

// A task runs the agent it names: its system prompt, its tools and its max steps; a
// task naming none runs the default agent. Replay verification re-decides each
// session with the same agents, and finds the one that ran with a named agent
// diverging without it.
func TestTaskRunsItsAgent(t *testing.T) {
	cfg, rec := agentsConfig(t)
	n := nodetest.Start(t, cfg)

	events := runAgentTask(t, n, node.Task{Input: "2+3?", SessionID: "with-calc", Agent: "calc"})
	reqs := rec.take()
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted || len(reqs) != 2 {
		t.Fatalf("calc: last event %s, %d model requests", last.Type, len(reqs))
	}
	for _, r := range reqs {
		if r.Messages[0].Content != "You only compute." || len(r.Tools) != 1 || r.Tools[0].Name != "calculator" || r.Scope.Agent != "calc" {
			t.Errorf("calc's request: system %q, tools %v, scope %+v", r.Messages[0].Content, r.Tools, r.Scope)
		}
	}

	// The default agent has every tool of the node: with named agents, delegate too.
	runAgentTask(t, n, node.Task{Input: "2+3?", SessionID: "with-default"})
	if r := rec.take()[0]; r.Messages[0].Content != node.DefaultSystemPrompt || len(r.Tools) != 3 || r.Tools[2].Name != node.DelegateTool || r.Scope.Agent != "default" {
		t.Errorf("the default agent's request: system %q, tools %v, scope %+v", r.Messages[0].Content, r.Tools, r.Scope)
	}

	// brief has no tools and one step: the model's tool call is answered as unknown,
	// and the task stops at its max steps.
	events = runAgentTask(t, n, node.Task{Input: "2+3?", SessionID: "with-brief", Agent: "brief"})
	if r := rec.take(); len(r) != 1 || len(r[0].Tools) != 0 || r[0].Messages[0].Content != "You stop early." {
		t.Errorf("brief: %d requests, %+v", len(r), r)
	}
	p, _ := events[len(events)-1].Decode()
	if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonMaxSteps {
		t.Errorf("brief's task ended with %+v, want max_steps", p)
	}

	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"with-calc", "with-default", "with-brief"} {
		events, err := n.Log().Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", id, div, err)
		}
	}
	events, _ = n.Log().Read(context.Background(), "with-calc", 1)
	// Without its agent the task cannot be re-decided: no divergence, a limit of
	// the verifying agents.
	var undecidable *actors.UndecidableError
	if div, err := actors.VerifyAmong(actors.Agents{Default: all.Default}, events); div != nil || !errors.As(err, &undecidable) || undecidable.Limit.Reason != messages.ReasonUnknownAgent {
		t.Errorf("verify with-calc without its agent: %v, %v; want it undecidable for the unknown agent", div, err)
	}
}

// A task naming an agent the node does not run is refused, over HTTP with a 400 and
// on the tasks topic as a poisoned message with the reason; nothing is written.
func TestUnknownAgentIsRefused(t *testing.T) {
	cfg, _ := agentsConfig(t)
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	code, out := post(t, srv.URL+"/v1/tasks", `{"input":"x","agent":"nope"}`)
	if code != 400 || !strings.Contains(out["error"], `unknown agent "nope": this node runs default, calc, brief`) {
		t.Errorf("POST with an unknown agent: %d %v", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := n.Bus().Publish(messages.TopicTasks, message.NewMessage("bad-agent", []byte(`{"input":"x","session_id":"s1","agent":"nope"}`))); err != nil {
			t.Error(err)
		}
	}()
	select {
	case p := <-poisoned:
		p.Ack()
		if reason := p.Metadata.Get(middleware.ReasonForPoisonedKey); p.UUID != "bad-agent" || !strings.Contains(reason, `unknown agent "nope"`) {
			t.Errorf("poisoned %s: %q", p.UUID, reason)
		}
	case <-ctx.Done():
		t.Fatal("the task with an unknown agent never reached the poison topic")
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil || len(infos) != 0 {
		t.Errorf("refused tasks wrote sessions: %v %v", infos, err)
	}
}

// A configuration's agents are checked when the node is built.
func TestNamedAgentsAreValidated(t *testing.T) {
	for _, c := range []struct {
		agents []node.NamedAgent
		want   string
	}{
		{[]node.NamedAgent{{Name: "Bad"}}, `agent "Bad"`},
		{[]node.NamedAgent{{Name: "default"}}, `agent "default"`},
		{[]node.NamedAgent{{Name: "a", Paradigm: "chaos"}}, "unknown paradigm"},
		{[]node.NamedAgent{{Name: "a", PlanExecute: actors.PlanExecute{Concurrency: 2}}}, "plan_execute settings on an agent of the function_calling paradigm"},
		{[]node.NamedAgent{{Name: "a", Paradigm: "plan_execute", Tools: []string{"calculator"}, PlanExecute: actors.PlanExecute{Executor: "b"}}}, `its executor "b" is reached through the delegate tool`},
		{[]node.NamedAgent{{Name: "a", Paradigm: "plan_execute", PlanExecute: actors.PlanExecute{Executor: "b"}}}, `its executor "b" is not another agent of the node`},
		{[]node.NamedAgent{{Name: "a"}, {Name: "a"}}, "declared twice"},
		{[]node.NamedAgent{{Name: "a", Tools: []string{"shell"}}}, `unknown tool "shell"`},
		{[]node.NamedAgent{{Name: "a", Fallbacks: []llm.Model{llm.Offline{}}}}, "fallbacks without a model"},
		{[]node.NamedAgent{{Name: "a", MemoryNamespace: "agent:a"}}, "needs MemoryTool"},
		{[]node.NamedAgent{{Name: "a", MemoryNamespace: "not a namespace"}}, "memory namespace"},
		{[]node.NamedAgent{{Name: "a", MCPServers: []string{"wx"}}}, "MCPServers and Skills need Tools"},
		{[]node.NamedAgent{{Name: "a", Tools: []string{}, MCPServers: []string{"wx"}}}, "the node has no MCP servers"},
		{[]node.NamedAgent{{Name: "a", Tools: []string{}, Skills: []string{"pdf"}}}, "no skills are configured"},
		{[]node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReflection, MaxRounds: 11}}, "max_rounds must be between 0 and 10"},
		{[]node.NamedAgent{{Name: "a", MaxRounds: 2}}, "max_rounds, critic_prompt and critic_model are the reflection paradigm's, not function_calling's"},
		{[]node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReflection, Evaluate: true}}, "are the reflexion paradigm's, not reflection's"},
		{[]node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReflexion, LessonsNamespace: "a/b"}}, "lessons_namespace"},
		{[]node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReflexion}}, "memory tool, which this node does not have"},
	} {
		_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Agents: c.agents})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("agents %+v: %v, want %q", c.agents, err, c.want)
		}
	}
}

// An agent whose system prompt fills its context window (less the answer's
// reserve) is refused when the node starts, saying so: it would cut every task's
// input to fit and answer a question it never read.
func TestAgentWhosePromptFillsTheWindowIsRefused(t *testing.T) {
	long := strings.Repeat("Be careful and thorough. ", 400) // about 2,000 tokens
	for _, c := range []struct {
		name string
		cfg  node.Config
		want string
	}{
		{"named", node.Config{Agents: []node.NamedAgent{{Name: "wordy", SystemPrompt: long, Context: actors.ContextOptions{Window: 1024, ReservedOutput: 256}}}},
			`agent "wordy": its system prompt is `},
		{"default", node.Config{SystemPrompt: long, Context: actors.ContextOptions{Window: 2048, ReservedOutput: 512}},
			"the default agent: its system prompt is "},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := node.New(context.Background(), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "leaves no room for a task") {
			t.Errorf("%s: %v, want it refused for its prompt", c.name, err)
		}
	}
	// The same prompt in a wide enough window is taken.
	n, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), SystemPrompt: long, Context: actors.ContextOptions{Window: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
}
