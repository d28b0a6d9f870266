package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// countingModel counts the calls that reach a model.
type countingModel struct {
	llm.Model
	calls atomic.Int64
}

func (m *countingModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	return m.Model.Generate(ctx, req)
}

// walkNode builds the node a user gets from the agents file at agentsPath (none
// when empty), on the model m, with the data directory data.
func walkNode(t *testing.T, data, agentsPath string, m llm.Model, edit func(*node.Config)) node.Config {
	t.Helper()
	cfg := node.Config{DataDir: data, Model: m}
	if agentsPath != "" {
		file, err := nodeconfig.LoadAgents(agentsPath)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": m}, nil); err != nil {
			t.Fatal(err)
		}
		cfg.Agents = file.NodeAgents()
	}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// walkReplay walks replay's promise over session id of the log in data, as a user
// would: verify, show, export then import into a fresh log and verify there, and
// fork at several seqs (the recorded part is not asked of the model again).
// flags are verify's and fork's (--config, --agents).
func walkReplay(t *testing.T, data, id string, flags ...string) {
	t.Helper()
	verifyArgs := append([]string{"verify", id, "--data", data}, flags...)
	if code, out, errs := replay(t, verifyArgs...); code != 0 || !strings.Contains(out, "deterministic") {
		t.Errorf("verify %s: exit %d\n%.3000s\n%.2000s", id, code, out, errs)
	}
	for _, args := range [][]string{{"show", id, "--data", data}, {"show", id, "--data", data, "--json"}, {"list", "--data", data}} {
		code, out, errs := replay(t, args...)
		if code != 0 {
			t.Errorf("%s: exit %d\n%.2000s", args, code, errs)
		}
		if !utf8.ValidString(out) {
			t.Errorf("%s: output is not UTF-8", args)
		}
		for _, c := range rawControls {
			// JSON carries the text as recorded, its C0 controls escaped.
			if strings.Contains(out, c) && (args[len(args)-1] != "--json" || c[0] < 0x20) {
				t.Errorf("%s: output carries the control %q raw", args, c)
			}
		}
	}
	events := readAll(t, data)[id]
	// Export, import into a fresh log: the same events, byte for byte, and verify.
	file := filepath.Join(t.TempDir(), "export.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", data, "--out", file); code != 0 {
		t.Fatalf("export %s: exit %d %s", id, code, errs)
	}
	fresh := t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", fresh); code != 0 {
		t.Fatalf("import %s: exit %d %s", id, code, errs)
	}
	imported := readAll(t, fresh)[id]
	if len(imported) != len(events) {
		t.Errorf("import %s: %d events, exported %d", id, len(imported), len(events))
	}
	for i := range min(len(imported), len(events)) {
		if a, b := mustMarshal(t, events[i]), mustMarshal(t, imported[i]); string(a) != string(b) {
			t.Errorf("import %s: event %d changed:\n%.500s\n%.500s", id, i+1, a, b)
			break
		}
	}
	if code, out, errs := replay(t, append([]string{"verify", id, "--data", fresh}, flags...)...); code != 0 {
		t.Errorf("verify the import of %s: exit %d\n%.3000s\n%.2000s", id, code, out, errs)
	}
	// Forks at the seqs where something was answered, up to the last task's end.
	last := uint64(0)
	for _, e := range events {
		if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
			last = e.Seq
		}
	}
	var ats []uint64
	for _, e := range events {
		if e.Seq >= last {
			break
		}
		switch e.Type {
		case messages.TypeTaskSubmitted, messages.TypeModelResponded, messages.TypeToolCallCompleted, messages.TypeModelRequested,
			messages.TypeApprovalRequested, messages.TypeApprovalResolved, messages.TypeTeamStateUpdated:
			ats = append(ats, e.Seq)
		}
	}
	if len(ats) > 10 {
		step := float64(len(ats)) / 10
		var picked []uint64
		for i := range 10 {
			picked = append(picked, ats[int(float64(i)*step)])
		}
		ats = picked
	}
	t.Logf("%s: %d events, forks at %v", id, len(events), ats)
	for _, at := range ats {
		fid := fmt.Sprintf("%s-f%d", id, at)
		args := append([]string{"fork", id, "--at", fmt.Sprint(at), "--session", fid, "--data", data, "--model", "offline"}, flags...)
		var code int
		var out, errs string
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, out, errs = replay(t, args...)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("fork %s at %d: no end in a minute", id, at)
		}
		// A fork whose task fails (as recorded, or after) exits 1, as node run does.
		if code != 0 && !strings.Contains(out+errs, "nothing to continue") && !(code == 1 && strings.Contains(out, "] failed (")) {
			t.Errorf("fork %s at %d: exit %d\n%.3000s\n%.2000s", id, at, code, out, errs)
			continue
		}
		if strings.Contains(out+errs, "nothing to continue") {
			continue
		}
		forked := readAll(t, data)[fid]
		answered := map[string]bool{}
		for _, e := range forked[:at] {
			if p, err := e.Decode(); err == nil {
				switch p := p.(type) {
				case *messages.ModelResponded:
					answered["model "+p.Key] = true
				case *messages.ToolCallCompleted:
					answered["tool "+p.Key] = true
				}
			}
		}
		for _, e := range forked[at:] {
			if p, err := e.Decode(); err == nil {
				switch p := p.(type) {
				case *messages.ModelRequested:
					if answered["model "+p.Key] {
						t.Errorf("fork %s at %d: seq %d asks the model again for %s, answered in the recorded part", id, at, e.Seq, p.Key)
					}
				case *messages.ToolCallRequested:
					if answered["tool "+p.Key] {
						t.Errorf("fork %s at %d: seq %d calls %s again for %s, answered in the recorded part", id, at, e.Seq, p.Tool, p.Key)
					}
				}
			}
		}
		if code, out, errs := replay(t, append([]string{"verify", fid, "--data", data}, flags...)...); code != 0 {
			t.Errorf("verify the fork %s: exit %d\n%.3000s\n%.2000s", fid, code, out, errs)
		}
	}
}

func examplePath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func walkEnv(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
}

// TestWalkParadigmsAndTeams records a session of each paradigm and team pattern of
// the examples and walks replay over it.
func TestWalkParadigmsAndTeams(t *testing.T) {
	walkEnv(t)
	for _, c := range []struct {
		name, file, agent, input string
	}{
		{"function_calling", "agents.yaml", "assistant", "What is 12 * (7 + 5)?"},
		{"react", "agents.yaml", "calculator", "What is 12 * (7 + 5)?"},
		{"simple", "agents.yaml", "writer", "echo a short text"},
		{"plan_execute", "plan_execute.yaml", "planner", "What is (3 + 4) * 5 and 10 / 2?"},
		{"reflection", "reflection.yaml", "reviewer", "What is 17 * 23?"},
		{"subagents", "subagents.yaml", "lead", "What is 12 * (7 + 5)?"},
		{"desk", "teams.yaml", "desk", "compute 12 * (7 + 5)"},
		{"pipeline", "teams.yaml", "compute_then_write", "What is 6 * 7?"},
		{"fan_out", "teams.yaml", "panel", "What is 6 * 7?"},
		{"debate", "teams.yaml", "review", "What is 6 * 7?"},
		{"handoff", "teams.yaml", "frontdesk", "What is 6 * 7?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			agents := examplePath(t, c.file)
			m := &countingModel{Model: llm.NewOffline()}
			cfg := walkNode(t, data, agents, m, nil)
			ends := recordTasks(t, cfg, nil, node.Task{Input: c.input, SessionID: "w", Agent: c.agent})
			if ends[0].Type != messages.TypeTaskCompleted {
				t.Logf("the task ended with %s", ends[0].Type)
			}
			calls := m.calls.Load()
			walkReplay(t, data, "w", "--agents", agents)
			for id := range readAll(t, data) {
				if strings.HasPrefix(id, "w.") {
					walkReplay(t, data, id, "--agents", agents)
				}
			}
			if got := m.calls.Load(); got != calls {
				t.Errorf("replay called the recording's model: %d calls, %d when recorded", got, calls)
			}
		})
	}
}

// blockingModel answers as its inner model, but its call number block waits until
// the call's context ends (a cancel, a deadline) and fails with that.
type blockingModel struct {
	llm.Model
	block   int64
	calls   atomic.Int64
	started chan struct{}
}

func (m *blockingModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if m.calls.Add(1) == m.block {
		close(m.started)
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
	return m.Model.Generate(ctx, req)
}

// failingModel fails every call for good.
type failingModel struct{ calls atomic.Int64 }

func (*failingModel) Name() string { return "failing" }
func (m *failingModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	return llm.Response{}, &llm.APIError{Provider: "fake", Model: "failing", StatusCode: 400, Message: "bad request: the model refuses"}
}

// startWalkNode starts a node of cfg, stopped and closed when the test ends or
// when the returned stop is called.
func startWalkNode(t *testing.T, cfg node.Config) (*node.Node, func()) {
	t.Helper()
	ctx := context.Background()
	n, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	var once atomic.Bool
	end := func() {
		if once.CompareAndSwap(false, true) {
			stop()
			n.Close()
		}
	}
	t.Cleanup(end)
	return n, end
}

// waitSession waits until the session's log holds events whose count of ended
// tasks is tasks, and returns them.
func waitSession(t *testing.T, n *node.Node, id string, tasks int) []messages.Envelope {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := n.Log().Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				ended++
			}
		}
		if ended >= tasks {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %d of %d tasks ended in 30 s", id, ended, tasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWalkApprovals(t *testing.T) {
	walkEnv(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"agents.yaml": `agents:
  careful:
    system_prompt: You solve arithmetic questions with the calculator; never guess a number.
    tools:
      - clock
      - {name: calculator, approval: required}
    approval_timeout: 10m
    max_steps: 4
  hasty:
    system_prompt: You solve arithmetic questions with the calculator; never guess a number.
    tools:
      - {name: calculator, approval: required}
    approval_timeout: 1s
    max_steps: 4
`})
	agents := filepath.Join(dir, "agents.yaml")
	for _, c := range []struct {
		name, agent string
		answer      *bool
	}{{"approved", "careful", new(true)}, {"denied", "careful", new(false)}, {"timeout", "hasty", nil}} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			m := &countingModel{Model: llm.NewOffline()}
			n, stop := startWalkNode(t, walkNode(t, data, agents, m, nil))
			if _, err := n.Submit(context.Background(), node.Task{Input: "What is 6 * 7?", SessionID: "w", Agent: c.agent}); err != nil {
				t.Fatal(err)
			}
			if c.answer != nil {
				var call string
				for deadline := time.Now().Add(30 * time.Second); call == ""; time.Sleep(10 * time.Millisecond) {
					list, err := n.PendingApprovals(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range list {
						call = p.Call
					}
					if time.Now().After(deadline) {
						t.Fatal("no approval asked")
					}
				}
				if err := n.Approve(context.Background(), "w", call, *c.answer, "not now", messages.ApprovedByHTTP); err != nil {
					t.Fatal(err)
				}
			}
			waitSession(t, n, "w", 1)
			stop()
			calls := m.calls.Load()
			walkReplay(t, data, "w", "--agents", agents)
			if got := m.calls.Load(); got != calls {
				t.Errorf("replay called the recording's model: %d calls, %d when recorded", got, calls)
			}
		})
	}
}

func TestWalkStops(t *testing.T) {
	walkEnv(t)
	t.Run("cancelled", func(t *testing.T) {
		data := t.TempDir()
		m := &blockingModel{Model: llm.NewOffline(), block: 2, started: make(chan struct{})}
		n, stop := startWalkNode(t, node.Config{DataDir: data, Model: m})
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "w"}); err != nil {
			t.Fatal(err)
		}
		<-m.started
		if err := n.Cancel(context.Background(), "w", "the user changed their mind"); err != nil {
			t.Fatal(err)
		}
		waitSession(t, n, "w", 1)
		stop()
		walkReplay(t, data, "w")
	})
	t.Run("deadline", func(t *testing.T) {
		data := t.TempDir()
		m := &blockingModel{Model: llm.NewOffline(), block: 2, started: make(chan struct{})}
		n, stop := startWalkNode(t, node.Config{DataDir: data, Model: m})
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "w", DeadlineMS: 1000}); err != nil {
			t.Fatal(err)
		}
		waitSession(t, n, "w", 1)
		stop()
		walkReplay(t, data, "w")
	})
	t.Run("model_error", func(t *testing.T) {
		data := t.TempDir()
		m := &failingModel{}
		n, stop := startWalkNode(t, node.Config{DataDir: data, Model: m})
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "w"}); err != nil {
			t.Fatal(err)
		}
		waitSession(t, n, "w", 1)
		stop()
		calls := m.calls.Load()
		walkReplay(t, data, "w")
		if got := m.calls.Load(); got != calls {
			t.Errorf("replay called the model: %d, %d when recorded", got, calls)
		}
	})
	t.Run("queued", func(t *testing.T) {
		data := t.TempDir()
		m := &countingModel{Model: llm.NewOffline()}
		n, stop := startWalkNode(t, node.Config{DataDir: data, Model: m})
		for _, in := range []string{"What is 12 * (7 + 5)?", "echo second", "What is 2 + 3?", "echo fourth"} {
			if _, err := n.Submit(context.Background(), node.Task{Input: in, SessionID: "w"}); err != nil {
				t.Fatal(err)
			}
		}
		waitSession(t, n, "w", 4)
		stop()
		walkReplay(t, data, "w")
	})
}

// TestWalkEffects records, on the node a configuration file builds, a session with
// a skill, a chain, parallel calls, an MCP tool whose output is hostile (terminal
// controls, 1 MB), the memory tool and the rag tool, and walks replay over it.
func TestWalkEffects(t *testing.T) {
	walkEnv(t)
	srv := sdk.NewServer(&sdk.Implementation{Name: "loud", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	var mcpCalls atomic.Int32
	sdk.AddTool(srv, &sdk.Tool{Name: "shout", Description: "Shouts the text"},
		func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
			mcpCalls.Add(1)
			text := strings.ToUpper(a.Text)
			if a.Text == "big" {
				text = hostileText + strings.Repeat("x", 1<<20)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	dir := t.TempDir()
	data, skillsDir := filepath.Join(dir, "data"), filepath.Join(dir, "skills")
	writeFiles(t, dir, map[string]string{
		"skills/greet/SKILL.md": "---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello by name.\n",
		"troupe.json": `{"model": "offline", "skills_dir": ` + quote(skillsDir) + `,
			"mcp_servers": {"loud": {"url": "` + hs.URL + `"}},
			"memory": {"tool": true, "namespace": "agent:default"},
			"knowledge": {"tool": true, "default": "docs"},
			"chains": [{"name": "twice", "description": "Doubles a number twice.",
				"input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
				"steps": [{"name": "a", "tool": "calculator", "args": "{\"expression\": \"{{.args.x}} * 2\"}"},
				          {"name": "b", "tool": "calculator", "args": "{\"expression\": \"{{.steps.a.output}} * 2\"}"}],
				"output": "{{.args.x}} doubled twice is {{.steps.b.output}}"}]}`,
	})
	cfgPath := filepath.Join(dir, "troupe.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc, err := nodeconfig.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := fc.Agent(nodeconfig.AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, stopMCP, err := nodeconfig.ConnectMCP(ctx, fc.MCPServers, 10*time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	memCfg, closeMem, _, err := fc.MemoryConfig(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeMem()
	kbCfg, closeKB, _, err := fc.KnowledgeConfig(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeKB()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "load_skill", Arguments: `{"name":"greet"}`}}},
		{ToolCalls: []messages.ToolCall{
			{ID: "c2", Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{ID: "c3", Name: "twice", Arguments: `{"x": 5}`},
			{ID: "c4", Name: "loud__shout", Arguments: `{"text":"big"}`},
			{ID: "c5", Name: "memory", Arguments: `{"op":"add","args":{"content":"The user likes \u001b[31mred\u001b[0m","importance":0.8}}`},
			{ID: "c6", Name: "calculator", Arguments: `{"expression":"1/0"}`},
		}},
		{ToolCalls: []messages.ToolCall{
			{ID: "c7", Name: "memory", Arguments: `{"op":"search","args":{"query":"likes"}}`},
			{ID: "c8", Name: "rag", Arguments: `{"op":"search","args":{"query":"port"}}`},
		}},
		{Content: "done " + hostileText + strings.Repeat("y", 1<<20)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{DataDir: data, Model: model, Knowledge: &kbCfg, Memory: &memCfg}
	agent.Apply(&cfg)
	cfg.ToolCatalog = client
	n, stop := startWalkNode(t, cfg)
	b, err := n.Knowledge().Base(ctx, "docs")
	if err == nil {
		_, err = b.AddText(ctx, "faq", "# FAQ\n\nThe node serves HTTP on port 8080. \x1b[2J", "k1")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(ctx, node.Task{Input: "greet and compute " + hostileText, SessionID: "w"}); err != nil {
		t.Fatal(err)
	}
	events := waitSession(t, n, "w", 1)
	stop()
	stopMCP()
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}
	calls := mcpCalls.Load()
	// The fork's MCP server: the same, for the fork's own calls.
	walkReplay(t, data, "w", "--config", cfgPath)
	_ = calls
}

// TestWalkReflexionAndReplan: a reflexion session on the example's node
// configuration (its memory tool stores the lesson), and a plan_execute session
// whose failed step is re-planned.
func TestWalkReflexionAndReplan(t *testing.T) {
	walkEnv(t)
	t.Run("reflexion", func(t *testing.T) {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		agents := examplePath(t, "reflexion.yaml")
		writeFiles(t, dir, map[string]string{"troupe.json": `{"agents_file": ` + quote(agents) + `, "memory": {"tool": true, "namespace": "agent:learner"}}`})
		m := &countingModel{Model: llm.NewOffline()}
		cfg := walkNode(t, data, agents, m, func(c *node.Config) {
			c.Memory, c.MemoryTool = &memory.Config{}, &memory.ToolConfig{Namespace: "agent:learner"}
		})
		ends := recordTasks(t, cfg, nil, node.Task{Input: "Who wrote Hamlet?", SessionID: "w", Agent: "learner"},
			node.Task{Input: "What is 6 * 7?", SessionID: "w", Agent: "learner"})
		if ends[1].Type != messages.TypeTaskCompleted {
			t.Fatalf("the task ended with %s", ends[1].Type)
		}
		calls := m.calls.Load()
		walkReplay(t, data, "w", "--config", filepath.Join(dir, "troupe.json"))
		if got := m.calls.Load(); got != calls {
			t.Errorf("replay called the recording's model: %d calls, %d when recorded", got, calls)
		}
	})
	t.Run("replan", func(t *testing.T) {
		data := t.TempDir()
		agents := examplePath(t, "plan_execute.yaml")
		model, err := llm.NewScripted(llm.Script{Name: "planner-model", Steps: []llm.ScriptStep{
			{Content: `{"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "6*7"}, "deps": []},
				{"id": "s2", "tool": "calculator", "args": {"expression": "1/0"}, "deps": []}], "answer": "list them"}`},
			{Content: `{"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "6*7"}, "deps": []},
				{"id": "s2.1", "tool": "calculator", "args": {"expression": "2+2"}, "deps": []}]}`},
			{Content: "42 and 4"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := walkNode(t, data, agents, model, nil)
		var purposes []string
		ends := recordTasks(t, cfg, func(e messages.Envelope) {
			if p, err := e.Decode(); err == nil {
				if r, ok := p.(*messages.ModelRequested); ok {
					purposes = append(purposes, r.Purpose)
				}
			}
		}, node.Task{Input: "What is 6*7 and 1/0?", SessionID: "w", Agent: "planner"})
		if ends[0].Type != messages.TypeTaskCompleted || !slices.Contains(purposes, "replan") {
			t.Fatalf("the task ended with %s after the calls %q", ends[0].Type, purposes)
		}
		walkReplay(t, data, "w", "--agents", agents)
	})
}

// TestWalkResumed: a node stopped mid-task (its model call unanswered), then a node
// of the same data directory resumes the task; replay walks the session.
func TestWalkResumed(t *testing.T) {
	walkEnv(t)
	data := t.TempDir()
	m := &blockingModel{Model: llm.NewOffline(), block: 2, started: make(chan struct{})}
	n, stop := startWalkNode(t, node.Config{DataDir: data, Model: m})
	if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "w"}); err != nil {
		t.Fatal(err)
	}
	<-m.started
	stop()
	before := readAll(t, data)["w"]
	t.Logf("stopped after %d events, the last %s", len(before), before[len(before)-1].Type)
	n2, stop2 := startWalkNode(t, node.Config{DataDir: data, Model: llm.NewOffline()})
	waitSession(t, n2, "w", 1)
	stop2()
	walkReplay(t, data, "w")
}
