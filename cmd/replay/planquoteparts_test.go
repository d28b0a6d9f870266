package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A plan_execute session recorded under decision rules 17 whose plan's tool step
// quotes a split step ({{a}}) waiting for one part alone verifies as deterministic
// and forks from after its plan under 17, its plan taken as it was (step b runs);
// recorded under 18 the same plan is refused and the planner asked again, and that
// session verifies and forks as recorded too.
func TestQuotedPartsPlanOfRules17VerifiesAndForks(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	plan := `{"steps": [{"id": "a.1", "tool": "calculator", "args": {"expression": "2+3"}},` +
		`{"id": "a.2", "tool": "calculator", "args": {"expression": "4*5"}},` +
		`{"id": "b", "tool": "calculator", "args": {"expression": "{{a}} * 2"}, "deps": ["a.1"]}]}`
	script, err := json.Marshal(map[string]any{"name": "planned", "steps": []map[string]string{{"content": plan}, {"content": plan}, {"content": "done"}, {"content": "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"script.json": string(script),
		"agents.yaml": "agents:\n  planner:\n    paradigm: plan_execute\n    model: scripted:" + filepath.Join(dir, "script.json") +
			"\n    tools: [calculator]\n    max_steps: 8\n    settings:\n      concurrency: 1\n      max_replans: 1\n"})
	agentsFile := filepath.Join(dir, "agents.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, rules := range []int{17, 18} {
		data := filepath.Join(dir, "data"+strconv.Itoa(rules))
		id := "plan" + strconv.Itoa(rules)
		last := recordTasks(t, node.Config{DataDir: data, Agents: file.NodeAgents(), DecisionRules: rules}, nil,
			node.Task{Input: "Compute.", SessionID: id, Agent: "planner"})[0]
		stepB, plans := false, 0
		for _, e := range readAll(t, data)[id] {
			switch e.Type {
			case messages.TypeToolCallRequested:
				stepB = stepB || strings.Contains(string(e.Payload), `"call_id":"b"`)
			case messages.TypeModelRequested:
				if strings.Contains(string(e.Payload), `"purpose":"plan"`) {
					plans++
				}
			}
		}
		// Under 17 the plan was taken and step b ran; under 18 it was refused, and
		// the planner asked again (its answers the same plan, then none).
		if rules == 17 && (!stepB || plans != 1) || rules == 18 && (stepB || plans != 3) {
			t.Errorf("rules %d (task %s): step b ran: %v, plans asked: %d", rules, last.Type, stepB, plans)
		}
		if code, out, errs := replay(t, "verify", id, "--data", data, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("rules %d: verify: exit %d\n%s%s", rules, code, out, errs)
		}
		fork := id + "-fork"
		// From right after the first plan: under 17 the fork runs its steps, under 18
		// it asks for a plan again.
		code, out, errs := replay(t, "fork", id, "--at", "3", "--session", fork, "--data", data, "--agents", agentsFile, "--model", "offline")
		if want := map[int]string{17: "[9] step b: tool calculator(", 18: "[5] model planned: plan, step 2"}[rules]; !strings.Contains(out, want) {
			t.Errorf("rules %d: the fork lacks %q: exit %d\n%s%s", rules, want, code, out, errs)
		}
		if code, out, errs := replay(t, "verify", fork, "--data", data, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("rules %d: verify the fork: exit %d\n%s%s", rules, code, out, errs)
		}
	}
}
