package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A task stopped by loop detection shows its reason in replay show, verifies as
// deterministic with the agents file it ran with, and diverges at its stop with a
// file whose loop_repeats changed.
func TestStoppedTaskShowsAndVerifies(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const agents = "agents:\n  wary:\n    loop_repeats: 2\n    max_tokens: 100000\n"
	writeFiles(t, dir, map[string]string{
		"agents.yaml":  agents,
		"lenient.yaml": strings.Replace(agents, "loop_repeats: 2", "loop_repeats: 3", 1),
	})
	file, err := nodeconfig.LoadAgents(filepath.Join(dir, "agents.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	step := llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{step, step, step, {Content: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	recordTasks(t, node.Config{DataDir: data, Model: model, Agents: file.NodeAgents()}, nil,
		node.Task{Input: "1+1?", SessionID: "looped", Agent: "wary"})

	want := `failed (loop_detected): stopped: the same call calculator({"expression":"1+1"}) was requested 2 times`
	if code, out, errs := replay(t, "show", "looped", "--data", data); code != 0 || !strings.Contains(out, want) {
		t.Errorf("show: exit %d, want %q\n%s%s", code, want, out, errs)
	}
	if code, out, errs := replay(t, "verify", "looped", "--data", data, "--agents", filepath.Join(dir, "agents.yaml")); code != 0 || !strings.Contains(out, "deterministic") {
		t.Errorf("verify: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := replay(t, "verify", "looped", "--data", data, "--agents", filepath.Join(dir, "lenient.yaml")); code != 1 || !strings.Contains(out, "diverges") {
		t.Errorf("verify with loop_repeats 3: exit %d %s", code, out)
	}
}

// show marks a model answer that was not finished, beside the task's failure.
func TestShowMarksACutAnswer(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	data := t.TempDir()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "It is one hun", FinishReason: "length"}}})
	if err != nil {
		t.Fatal(err)
	}
	recordTasks(t, node.Config{DataDir: data, Model: model}, nil, node.Task{Input: "12*12?", SessionID: "cut"})
	code, out, errs := replay(t, "show", "cut", "--data", data)
	if code != 0 || !strings.Contains(out, "answer: It is one hun [not finished: length]") || !strings.Contains(out, "failed (output_truncated)") {
		t.Fatalf("show: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "cut", "--data", data); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
}
