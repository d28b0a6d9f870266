package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// planFixture records a plan_execute session whose plan runs two steps in
// parallel, delegates one to another agent, has one step's call fail, and is
// re-planned; it returns the data dir, the agents file and the session's events.
func planFixture(t *testing.T) (data, agentsPath string, events []messages.Envelope) {
	t.Helper()
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	q := strconv.Quote
	plan := `{"steps":[{"id":"a","goal":"add","tool":"calculator","args":{"expression":"2+3"},"deps":[]},` +
		`{"id":"b","goal":"multiply","tool":"calculator","args":{"expression":"4*5"},"deps":[]},` +
		`{"id":"c","goal":"check a","agent":"helper","deps":["a"]},` +
		`{"id":"d","goal":"broken","tool":"calculator","args":{"expression":"2+*"},"deps":["a"]}],"answer":"join"}`
	replan := `{"steps":[{"id":"a","goal":"add","tool":"calculator","args":{"expression":"2+3"},"deps":[]},` +
		`{"id":"b","goal":"multiply","tool":"calculator","args":{"expression":"4*5"},"deps":[]},` +
		`{"id":"c","goal":"check a","agent":"helper","deps":["a"]},` +
		`{"id":"e","goal":"sum","tool":"calculator","args":{"expression":"{{a}}+{{b}}"},"deps":["a","b"]}],"answer":"join"}`
	writeFiles(t, dir, map[string]string{
		"planner.json": `{"name": "planner", "steps": [{"content": ` + q(plan) + `}, {"content": ` + q(replan) + `}, {"content": "25 in all"}]}`,
		"helper.json":  `{"name": "helper", "steps": [{"content": "a is right"}]}`,
		"agents.yaml": "agents:\n  planner:\n    paradigm: plan_execute\n    model: scripted:" + filepath.Join(dir, "planner.json") +
			"\n    tools: [calculator, delegate]\n  helper:\n    description: checks\n    model: scripted:" + filepath.Join(dir, "helper.json") +
			"\n    tools: [calculator]\n",
	})
	agentsPath = filepath.Join(dir, "agents.yaml")
	file, err := nodeconfig.LoadAgents(agentsPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	last := recordTasks(t, node.Config{DataDir: data, Model: llm.Offline{}, Agents: file.NodeAgents()}, nil,
		node.Task{Input: "What is 2+3 plus 4*5?", SessionID: "plan", Agent: "planner"})[0]
	if last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	events = readAll(t, data)["plan"]
	var failed, replans int
	for _, e := range events {
		p, _ := e.Decode()
		switch p := p.(type) {
		case *messages.ToolCallCompleted:
			if p.Error != "" {
				failed++
			}
		case *messages.ModelRequested:
			if p.Purpose == "replan" {
				replans++
			}
		}
	}
	if failed != 1 || replans != 1 {
		t.Fatalf("the session has %d failed calls and %d re-plans, want 1 and 1", failed, replans)
	}
	return data, agentsPath, events
}

// A plan_execute session with parallel steps, a delegated step, a failed call and a
// re-plan verifies; a fork from each of its events (before the plan, between the
// steps, after the re-plan) continues to the same answer, verifies, and makes its
// calls under keys of its own (its delegation a child session of its own).
func TestForkAPlanWithAReplanAtEachSeq(t *testing.T) {
	data, agentsPath, events := planFixture(t)
	if code, out, errs := replay(t, "verify", "plan", "--data", data, "--agents", agentsPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
	for at := 1; at < len(events); at++ {
		id := "plan-fork-" + strconv.Itoa(at)
		code, out, errs := replay(t, "fork", "plan", "--at", strconv.Itoa(at), "--session", id, "--data", data, "--agents", agentsPath, "--model", "offline")
		if code != 0 || !strings.Contains(out, "answer: 25 in all") {
			t.Errorf("fork at %d (%s): exit %d\n%s%s", at, events[at-1].Type, code, out, errs)
			continue
		}
		all := readAll(t, data)
		fork := all[id]
		for _, e := range fork[at:] {
			p, _ := e.Decode()
			if r, ok := p.(*messages.ToolCallRequested); ok && !strings.HasPrefix(r.Key, id+"/") {
				t.Errorf("fork at %d: a call under key %s", at, r.Key)
			}
			if r, ok := p.(*messages.ToolCallRequested); ok && r.Tool == node.DelegateTool {
				key, err := messages.ParseEffectKey(r.Key)
				if err != nil {
					t.Fatal(err)
				}
				child := all[node.ChildSessionID(key)]
				if len(child) == 0 || child[len(child)-1].Type != messages.TypeTaskCompleted {
					t.Errorf("fork at %d: the delegation's child session %s: %d events", at, node.ChildSessionID(key), len(child))
				}
			}
		}
		if code, out, errs := replay(t, "verify", id, "--data", data, "--agents", agentsPath); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify the fork at %d: exit %d\n%s%s", at, code, out, errs)
		}
	}
}

// The session exports, imports into another log, and exports from there to the
// same bytes.
func TestExportOfAPlanRoundTrips(t *testing.T) {
	data, agentsPath, _ := planFixture(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "1.jsonl"), filepath.Join(dir, "2.jsonl")
	if code, out, errs := replay(t, "export", "plan", "--data", data, "--out", first); code != 0 {
		t.Fatalf("export: %d %s %s", code, out, errs)
	}
	other := filepath.Join(dir, "other")
	if code, out, errs := replay(t, "import", first, "--data", other); code != 0 {
		t.Fatalf("import: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "export", "plan", "--data", other, "--out", second); code != 0 {
		t.Fatalf("export again: %d %s %s", code, out, errs)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Errorf("the export changed through an import:\n%s\n---\n%s", a, b)
	}
	if code, out, errs := replay(t, "verify", "plan", "--data", other, "--agents", agentsPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify the import: exit %d\n%s%s", code, out, errs)
	}
}
