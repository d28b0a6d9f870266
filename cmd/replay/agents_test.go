package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A session whose task named an agent of an agents file verifies against that file
// (--agents, or the configuration's agents_file), and with a file whose agent's
// system prompt changed since (the task recorded it), and diverges without it or
// with a file whose agent stops sooner. The recording node is built from the file as node serve
// builds it.
func TestVerifyRebuildsTheNamedAgent(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const agents = "agents:\n  thinker:\n    paradigm: react\n    system_prompt: You think aloud.\n    tools: [calculator]\n    max_steps: 4\n"
	writeFiles(t, dir, map[string]string{
		"agents.yaml":  agents,
		"changed.yaml": strings.Replace(agents, "You think aloud.", "You think quietly.", 1),
		"troupe.json":  `{"agents_file": ` + quote(filepath.Join(dir, "agents.yaml")) + `}`,
	})
	file, err := nodeconfig.LoadAgents(filepath.Join(dir, "agents.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{Content: "Thought: add\nAction: calculator[{\"expression\": \"2+3\"}]"},
		{Content: "Thought: done\nFinish[5]"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if last := recordTasks(t, node.Config{DataDir: data, Model: model, Agents: file.NodeAgents()}, nil,
		node.Task{Input: "2+3?", SessionID: "named", Agent: "thinker"})[0]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}

	for _, args := range [][]string{
		{"--agents", filepath.Join(dir, "agents.yaml")},
		{"--config", filepath.Join(dir, "troupe.json")},
	} {
		if code, out, errs := replay(t, append([]string{"verify", "named", "--data", data}, args...)...); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify %v: exit %d\n%s%s", args, code, out, errs)
		}
	}
	// Without the file the task cannot be re-decided: no divergence, exit 3.
	if code, out, errs := replay(t, "verify", "named", "--data", data); code != exitCannotVerify || !strings.Contains(out, "session named: cannot verify: ") ||
		!strings.Contains(out, "unknown_agent") || strings.Contains(out, "diverges") ||
		!strings.Contains(errs, `hint: the session ran agent "thinker", which neither --agents nor --config defines here`) {
		t.Errorf("verify without the agents file: exit %d %s%s", code, out, errs)
	}
	// The task recorded the agent's system prompt (decision rules 7): it is
	// re-decided under it with the prompt changed since; a change of what it did
	// not record (its max_steps) still diverges.
	if code, out, errs := replay(t, "verify", "named", "--data", data, "--agents", filepath.Join(dir, "changed.yaml")); code != 0 || !strings.Contains(out, "deterministic") {
		t.Errorf("verify with a changed prompt: exit %d %s%s", code, out, errs)
	}
	writeFiles(t, dir, map[string]string{"shorter.yaml": strings.Replace(agents, "max_steps: 4", "max_steps: 1", 1)})
	if code, out, _ := replay(t, "verify", "named", "--data", data, "--agents", filepath.Join(dir, "shorter.yaml")); code != 1 || !strings.Contains(out, "diverges") {
		t.Errorf("verify with a changed max_steps: exit %d %s", code, out)
	}
	writeFiles(t, dir, map[string]string{"bad.yaml": "agents:\n  thinker:\n    tools: [shell]\n"})
	if code, _, errs := replay(t, "verify", "named", "--data", data, "--agents", filepath.Join(dir, "bad.yaml")); code != 2 || !strings.Contains(errs, `line 3: agent "thinker": unknown tool "shell"`) {
		t.Errorf("verify with a bad agents file: exit %d %s", code, errs)
	}
}

// A session whose tasks ran agents with models of their own verifies with the same
// agents file, each task against the model its agent recorded; a fork from the
// middle of an agent's task continues with that agent's model, not --model.
func TestVerifyAndForkAnAgentWithItsOwnModel(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFiles(t, dir, map[string]string{"long.json": `{"name": "long", "steps": [` +
		`{"tool_calls": [{"id": "c1", "name": "calculator", "arguments": "{\"expression\":\"2+3\"}"}]}, {"content": "5 from long"}]}`})
	agentsPath := filepath.Join(dir, "agents.yaml")
	writeFiles(t, dir, map[string]string{"agents.yaml": "agents:\n  alpha:\n    model: scripted:" + filepath.Join(dir, "long.json") + "\n    tools: [calculator]\n"})
	file, err := nodeconfig.LoadAgents(agentsPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: data, Model: llm.Offline{}, Agents: file.NodeAgents()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, stopWatch := n.Watch("own")
	for _, task := range []node.Task{{Input: "2+3?", SessionID: "own", Agent: "alpha"}, {Input: "What is 2 + 3?", SessionID: "own"}} {
		if _, err := n.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
		var last messages.Envelope
		for timeout := time.After(10 * time.Second); last.Type != messages.TypeTaskCompleted && last.Type != messages.TypeTaskFailed; {
			select {
			case last = <-live:
			case <-timeout:
				t.Fatal("the task did not finish in 10 s")
			}
		}
		if last.Type != messages.TypeTaskCompleted {
			t.Fatalf("task %q ended with %s", task.Input, last.Type)
		}
	}
	events, err := n.Log().Read(ctx, "own", 1)
	if err != nil {
		t.Fatal(err)
	}
	stopWatch()
	stop()
	n.Close()
	var models []string
	var afterTool uint64
	for _, e := range events {
		switch e.Type {
		case messages.TypeModelRequested:
			p, _ := e.Decode()
			models = append(models, p.(*messages.ModelRequested).Model)
		case messages.TypeToolCallCompleted:
			if afterTool == 0 {
				afterTool = e.Seq
			}
		}
	}
	if strings.Join(models, ",") != "long,long,offline,offline" {
		t.Fatalf("the session asked %v, want long twice (alpha's task), then offline", models)
	}

	if code, out, errs := replay(t, "verify", "own", "--data", data, "--agents", agentsPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Errorf("verify: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := replay(t, "fork", "own", "--at", fmt.Sprint(afterTool), "--data", data, "--agents", agentsPath, "--model", "offline", "--session", "own-fork")
	if code != 0 || !strings.Contains(out, "5 from long") {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errs)
	}
	st := store{data: data}
	log, err := st.open(ctx, reading)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	forked, err := log.Read(ctx, "own-fork", 1)
	if err != nil {
		t.Fatal(err)
	}
	var last *messages.ModelResponded
	for _, e := range forked {
		if e.Type == messages.TypeModelResponded {
			p, _ := e.Decode()
			last = p.(*messages.ModelResponded)
		}
	}
	if last == nil || last.Model != "long" {
		t.Errorf("the fork's last answer came from %+v, want alpha's model long", last)
	}
}

// A task that the node recording it failed for a limit of its own (it did not run
// the task's agent) verifies with the agents file that defines the agent: the
// failure is what happened, taken as recorded and said so, not a divergence.
func TestVerifyTakesTheRecordingNodesUnknownAgentAsRecorded(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFiles(t, dir, map[string]string{"agents.yaml": "agents:\n  writer:\n    system_prompt: You write.\n    max_steps: 3\n"})
	// As a node without the agents file records the task (one whose ingress had it).
	var events []messages.Envelope
	for i, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "write", Agent: "writer", Rules: actors.ContextRules},
		&messages.TaskFailed{Reason: messages.ReasonUnknownAgent, Error: `unknown agent "writer": this node does not run it`},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor, e.CorrelationID, e.CausationID = fmt.Sprintf("lost/%d", i+1), "lost", uint64(i+1), 1, "session", "lost/1", "lost/1"
		events = append(events, e)
	}
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	code, out, errs := replay(t, "verify", "lost", "--data", data, "--agents", filepath.Join(dir, "agents.yaml"))
	if code != 0 || !strings.Contains(out, "session lost: deterministic") || strings.Contains(out, "diverges") ||
		!strings.Contains(out, `taken as recorded: the task `) || !strings.Contains(out, `(unknown_agent: unknown agent "writer": this node does not run it)`) {
		t.Errorf("verify with the agents file: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "lost", "--data", data); code != 0 || !strings.Contains(out, "deterministic") || strings.Contains(out, "taken as recorded") {
		t.Errorf("verify without it: exit %d\n%s%s", code, out, errs)
	}
}
