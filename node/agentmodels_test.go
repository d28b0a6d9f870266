package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// fakeProvider is an OpenAI-compatible server that answers "from <model>" to a
// request for any model but "down", which it refuses with a 400.
func fakeProvider(t *testing.T) *openaitest.Server {
	return openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		model, _ := r.JSON(t)["model"].(string)
		if model == "down" {
			return openaitest.Error(400, "the model is down")
		}
		return openaitest.Completion(messages.ChatMessage{Role: messages.RoleAssistant, Content: "from " + model},
			messages.Usage{PromptTokens: 10, CompletionTokens: 2})
	})
}

func providerModel(t *testing.T, srv *openaitest.Server, name string) llm.Model {
	t.Helper()
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: name})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// modelsOf returns the models a session's model.requested and model.responded
// events name, and its output.
func modelsOf(t *testing.T, events []messages.Envelope) (requested, responded []string, output string) {
	t.Helper()
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ModelRequested:
			requested = append(requested, p.Model)
		case *messages.ModelResponded:
			responded = append(responded, p.Model)
		case *messages.TaskCompleted:
			output = p.Output
		case *messages.TaskFailed:
			output = "failed: " + p.Error
		}
	}
	return requested, responded, output
}

// Two agents on one node reach two different models of a provider, and the second
// falls back when its model fails; the node's own agent keeps the node's model. The
// events record which model each call asked for and which answered, and replay
// verification re-decides each session with the same agents.
func TestAgentsRunTheirOwnModels(t *testing.T) {
	srv := fakeProvider(t)
	def, err := llm.NewScripted(llm.Script{Name: "node-model", Steps: []llm.ScriptStep{{Content: "from the node's model"}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Model: def, Agents: []node.NamedAgent{
		{Name: "alpha", Model: providerModel(t, srv, "model-a")},
		{Name: "beta", Model: providerModel(t, srv, "down"), Fallbacks: []llm.Model{providerModel(t, srv, "model-b")}},
		{Name: "gamma", SystemPrompt: "The node's model."},
	}}
	n := nodetest.Start(t, cfg)

	for _, c := range []struct {
		agent, output string
		requested     string
		responded     string
	}{
		{"alpha", "from model-a", "model-a", "model-a"},
		{"beta", "from model-b", "down", "model-b"},
		{"gamma", "from the node's model", "node-model", "node-model"},
		{"", "from the node's model", "node-model", "node-model"},
	} {
		id := "with-" + c.agent
		events := runAgentTask(t, n, node.Task{Input: "hello", SessionID: id, Agent: c.agent})
		req, resp, out := modelsOf(t, events)
		if out != c.output || strings.Join(req, ",") != c.requested || strings.Join(resp, ",") != c.responded {
			t.Errorf("agent %q: output %q, requested %v, responded %v; want %q, %s, %s", c.agent, out, req, resp, c.output, c.requested, c.responded)
		}
	}
	var asked []string
	for _, r := range srv.Requests() {
		if r.Is("/chat/completions") {
			asked = append(asked, r.JSON(t)["model"].(string))
		}
	}
	if strings.Join(asked, ",") != "model-a,down,model-b" {
		t.Errorf("the provider was asked for %v, want model-a, then down and its fallback model-b", asked)
	}

	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if all.Named["alpha"].Model != "model-a" || all.Named["beta"].Model != "down" || all.Named["gamma"].Model != "node-model" {
		t.Errorf("agents' models: %+v", all.Named)
	}
	for _, id := range []string{"with-alpha", "with-beta", "with-gamma", "with-"} {
		events, err := n.Log().Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", id, div, err)
		}
	}
}

// memoryAddModel adds the task's input to the memory through the memory tool, then
// answers "ok".
type memoryAddModel struct{}

func (memoryAddModel) Name() string { return "memory-add" }

func (memoryAddModel) Generate(_ context.Context, r llm.Request) (llm.Response, error) {
	last := r.Messages[len(r.Messages)-1]
	if last.Role == messages.RoleUser {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{
			ID: "c1", Name: "memory", Arguments: `{"op":"add","args":{"content":"` + last.Content + `"}}`}}}}, nil
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}}, nil
}

// Two agents with memory namespaces of their own keep separate memories: each one's
// memory tool writes to its namespace, its tool says which, and its tasks carry its
// namespace's core blocks; the node's agent keeps the node's namespace.
func TestAgentsKeepSeparateMemories(t *testing.T) {
	// The model writes the latest message: the agents recall nothing first, which
	// would put a briefing after the task.
	cfg := node.Config{Model: memoryAddModel{}, Memory: &memory.Config{}, Context: actors.ContextOptions{Recall: actors.GatherOff},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default", Namespaces: []string{"user:alice", "agent:b"}},
		Agents: []node.NamedAgent{
			{Name: "a", MemoryNamespace: "agent:a"},
			{Name: "b", MemoryNamespace: "agent:b", Tools: []string{"memory"}},
			{Name: "c"},
		}}
	n := nodetest.Start(t, cfg)
	ctx := context.Background()
	nsA, err := n.Memories().Namespace(ctx, "agent:a")
	if err != nil {
		t.Fatal(err)
	}
	if err := nsA.SetBlock(ctx, "k1", memory.Block{Label: memory.BlockHuman, Value: "Works with a."}, "test"); err != nil {
		t.Fatal(err)
	}

	evA := runAgentTask(t, n, node.Task{Input: "a likes tea", SessionID: "s-a", Agent: "a"})
	runAgentTask(t, n, node.Task{Input: "b likes coffee", SessionID: "s-b", Agent: "b"})
	runAgentTask(t, n, node.Task{Input: "c likes water", SessionID: "s-c", Agent: "c"})
	evD := runAgentTask(t, n, node.Task{Input: "default likes milk", SessionID: "s-d"})

	for ns, want := range map[string]string{"agent:a": "a likes tea", "agent:b": "b likes coffee", "agent:default": "c likes water|default likes milk"} {
		space, err := n.Memories().Namespace(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range space.Snapshot() {
			got = append(got, m.Content)
		}
		if len(got) != len(strings.Split(want, "|")) {
			t.Errorf("namespace %s holds %q, want %q", ns, got, want)
			continue
		}
		for _, w := range strings.Split(want, "|") {
			if !strings.Contains(strings.Join(got, "|"), w) {
				t.Errorf("namespace %s holds %q, want %q", ns, got, want)
			}
		}
	}
	if got := taskMemory(t, evA, "a likes tea"); !strings.Contains(got, "Works with a.") {
		t.Errorf("agent a's task memory = %q, want its namespace's blocks", got)
	}
	if got := taskMemory(t, evD, "default likes milk"); got != "" {
		t.Errorf("the default agent's task memory = %q, want none (its namespace has no block)", got)
	}

	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	spec := func(a actors.Agent) string {
		for _, s := range a.ToolSpecs() {
			if s.Name == "memory" {
				return s.Description + string(s.Parameters)
			}
		}
		return ""
	}
	if s := spec(all.Named["a"]); !strings.Contains(s, "yours is agent:a") || strings.Contains(s, "agent:default") {
		t.Errorf("agent a's memory tool: %s", s)
	}
	if s := spec(all.Named["b"]); !strings.Contains(s, "yours is agent:b") || !strings.Contains(s, "user:alice") {
		t.Errorf("agent b's memory tool: %s", s)
	}
	if s := spec(all.Named["c"]); !strings.Contains(s, "yours is agent:default") {
		t.Errorf("agent c's memory tool: %s", s)
	}
	for _, id := range []string{"s-a", "s-b", "s-c", "s-d"} {
		events, err := n.Log().Read(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", id, div, err)
		}
	}
}

// Under a disclosure strategy, an agent without a tools list of its own, but with a
// memory namespace, is offered its own memory tool once loaded.
func TestDisclosedMemoryToolIsTheAgents(t *testing.T) {
	cfg := node.Config{Memory: &memory.Config{}, Disclosure: disclosure.Search,
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"},
		Agents:     []node.NamedAgent{{Name: "a", MemoryNamespace: "agent:a"}}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: `{"loaded":["memory"]}`}}
	for agent, want := range map[string]string{"a": "yours is agent:a", "default": "yours is agent:default"} {
		a, _ := all.For(agent)
		if a.Disclosure == nil {
			t.Fatalf("agent %s has no disclosure", agent)
		}
		specs, _ := a.Disclosure.Disclose(loads, nil)
		found := ""
		for _, s := range specs {
			if s.Name == "memory" {
				found = s.Description
			}
		}
		if !strings.Contains(found, want) {
			t.Errorf("agent %s is offered the memory tool %q, want %q", agent, found, want)
		}
	}
}
