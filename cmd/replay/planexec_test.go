package main

import (
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A plan_execute session recorded with the offline model (the repository's example
// agents file) shows its plan's calls in replay show, verifies as deterministic, and
// a fork of it from a middle step, after one step's result and before the other's,
// runs to the same answer.
func TestPlanExecuteSessionShowsVerifiesAndForks(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	data := filepath.Join(t.TempDir(), "data")
	_, here, _, _ := runtime.Caller(0)
	agentsFile := filepath.Join(filepath.Dir(here), "..", "..", "examples", "plan_execute.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	if last := recordTasks(t, node.Config{DataDir: data, Agents: file.NodeAgents()}, nil,
		node.Task{Input: "What is 2+3 and what is 4*5?", SessionID: "plan", Agent: "planner"})[0]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}

	code, out, errs := replay(t, "show", "plan", "--data", data)
	for _, want := range []string{"ask offline to plan", "step s1: calculator(", "step s2: calculator(", "ask offline to answer", "completed: 2+3 = 5 and 4*5 = 20"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show lacks %q: %d\n%s%s", want, code, out, errs)
		}
	}
	if code, out, errs := replay(t, "verify", "plan", "--data", data, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}

	// Fork right after the plan (the fork runs both steps), and right after the
	// first step's result (the fork re-issues only the other step, requested and
	// unanswered there, then asks for the answer).
	events := readAll(t, data)["plan"]
	var plan, firstResult int
	for _, e := range events {
		switch {
		case e.Type == messages.TypeModelResponded && plan == 0:
			plan = int(e.Seq)
		case e.Type == messages.TypeToolCallCompleted && firstResult == 0:
			firstResult = int(e.Seq)
		}
	}
	for _, c := range []struct {
		at, newSteps int
	}{{plan, 2}, {firstResult, 0}} {
		id := "plan-fork-" + strconv.Itoa(c.at)
		code, out, errs = replay(t, "fork", "plan", "--at", strconv.Itoa(c.at), "--session", id, "--data", data, "--agents", agentsFile, "--model", "offline")
		if code != 0 || !strings.Contains(out, "answer: 2+3 = 5 and 4*5 = 20") {
			t.Fatalf("fork at %d: exit %d\n%s%s", c.at, code, out, errs)
		}
		steps := 0
		for _, e := range readAll(t, data)[id][c.at:] {
			if e.Type == messages.TypeToolCallRequested {
				steps++
			}
		}
		if steps != c.newSteps {
			t.Fatalf("the fork at %d requested %d step calls, want %d", c.at, steps, c.newSteps)
		}
		if code, out, errs := replay(t, "verify", id, "--data", data, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
			t.Fatalf("verify the fork at %d: exit %d\n%s%s", c.at, code, out, errs)
		}
	}
}
