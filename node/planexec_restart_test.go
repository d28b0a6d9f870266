package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// planRestartRun is what runPlanRestart saw.
type planRestartRun struct {
	events  []messages.Envelope
	perKey  map[string]int // tally performed, by idempotency key
	byArg   map[string]int // tally performed, by its n
	second  *byAgent       // the models of the node that finished the task
	answers []string       // the answer call's prompt hashes
}

// runPlanRestart runs the plan below on one node, or, with kill, on a node killed
// while step b's call is in flight (after the others finished) and a second node
// on the same log. The plan: a and b in parallel; c (delegated to helper) and d
// after a; d's call fails, which re-plans once the steps in flight (b) finished;
// the re-plan keeps a, b, c and replaces d by e; then the answer.
func runPlanRestart(t *testing.T, kill bool) planRestartRun {
	t.Helper()
	dir := t.TempDir()
	var mu sync.Mutex
	perKey, byArg := map[string]int{}, map[string]int{}
	tally := func(holdB bool) tools.Tool {
		return tools.MustFunc("tally", "Counts n.", func(ctx context.Context, a struct {
			N string `json:"n"`
		}) (string, error) {
			mu.Lock()
			perKey[tools.CallKey(ctx)]++
			byArg[a.N]++
			mu.Unlock()
			switch {
			case a.N == "d":
				return "", errors.New("d cannot be tallied")
			case a.N == "b" && holdB:
				<-ctx.Done() // never answers on the node that is killed
				return "", ctx.Err()
			}
			return "tallied " + a.N, nil
		})
	}
	plan := `{"steps":[{"id":"a","goal":"tally a","tool":"tally","args":{"n":"a"},"deps":[]},` +
		`{"id":"b","goal":"tally b","tool":"tally","args":{"n":"b"},"deps":[]},` +
		`{"id":"c","goal":"ask the helper","agent":"helper","deps":["a"]},` +
		`{"id":"d","goal":"tally d","tool":"tally","args":{"n":"d"},"deps":["a"]}],"answer":"say it"}`
	replan := `{"steps":[{"id":"a","goal":"tally a","tool":"tally","args":{"n":"a"},"deps":[]},` +
		`{"id":"b","goal":"tally b","tool":"tally","args":{"n":"b"},"deps":[]},` +
		`{"id":"c","goal":"ask the helper","agent":"helper","deps":["a"]},` +
		`{"id":"e","goal":"tally e","tool":"tally","args":{"n":"e"},"deps":["a","b"]}],"answer":"say it"}`
	scripts := map[string][]llm.ScriptStep{
		"planner": {{Content: plan}, {Content: replan}, {Content: "all tallied"}},
		"helper":  {{Content: "helped"}},
	}
	config := func(model llm.Model, holdB bool) node.Config {
		return node.Config{Model: model, DataDir: dir, Tools: []tools.Tool{tools.Calculator{}, tally(holdB)}, Agents: []node.NamedAgent{
			{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{"tally", node.DelegateTool},
				PlanExecute: actors.PlanExecute{Agents: map[string]string{"helper": "helps"}}},
			{Name: "helper", Description: "helps", Tools: []string{"tally"}},
		}}
	}
	var out planRestartRun
	first := newByAgent(t, scripts)
	finisher := first
	if kill {
		cfg1 := config(first, true)
		cfg1.HandoffGrace = heldCallGrace
		n1, stop1 := startWithTask(t, cfg1, node.Task{Input: "tally", SessionID: "plan", Agent: "planner"})
		waitFor(t, 10*time.Second, "a, c and d finished, b in flight", func() bool {
			return len(payloads[*messages.ToolCallCompleted](t, readAll(t, n1.Log(), "plan"))) == 3
		})
		stop1()
		finisher = newByAgent(t, scripts)
		n2 := nodetest.Start(t, config(finisher, false))
		waitFor(t, 10*time.Second, "the task to end", func() bool {
			out.events = readAll(t, n2.Log(), "plan")
			last := out.events[len(out.events)-1].Type
			return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
		})
	} else {
		n := nodetest.Start(t, config(first, false))
		out.events = runAgentTask(t, n, node.Task{Input: "tally", SessionID: "plan", Agent: "planner"})
	}
	all, err := config(first, false).AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, out.events); err != nil || div != nil {
		t.Errorf("verify (kill %v): %v %v", kill, div, err)
	}
	for _, r := range payloads[*messages.ModelRequested](t, out.events) {
		if r.Purpose == actors.PurposeAnswer {
			out.answers = append(out.answers, r.PromptHash)
		}
	}
	mu.Lock()
	out.perKey, out.byArg = perKey, byArg
	mu.Unlock()
	out.second = finisher
	return out
}

// A node killed while plan_execute's parallel steps run, one of them failed: the
// next node on the same log does not ask for the plan again, performs no step whose
// result is recorded again (only b, in flight, under its key), re-plans, and ends
// with the answer an uninterrupted run gives, from the same prompt.
func TestPlanExecuteSurvivesAKillAmidItsParallelSteps(t *testing.T) {
	plain := runPlanRestart(t, false)
	killed := runPlanRestart(t, true)
	for _, r := range []planRestartRun{plain, killed} {
		if got := payloads[*messages.TaskCompleted](t, r.events); len(got) != 1 || got[0].Output != "all tallied" {
			t.Fatalf("the task's end: %+v", r.events[len(r.events)-1])
		}
	}
	if killed.second.callsOf("planner") != 2 || killed.second.callsOf("helper") != 0 {
		t.Errorf("after the restart the planner was asked %d times (want 2: re-plan, answer) and the helper %d (want 0)",
			killed.second.callsOf("planner"), killed.second.callsOf("helper"))
	}
	for n, want := range map[string]int{"a": 1, "b": 2, "d": 1, "e": 1} {
		if killed.byArg[n] != want {
			t.Errorf("tally %s performed %d times, want %d (%v)", n, killed.byArg[n], want, killed.byArg)
		}
	}
	if len(killed.perKey) != 4 {
		t.Errorf("tally ran under %d keys, want 4 (b's twice under one): %v", len(killed.perKey), killed.perKey)
	}
	if len(plain.answers) != 1 || len(killed.answers) != 1 || plain.answers[0] != killed.answers[0] {
		t.Errorf("the answer's prompt: %v uninterrupted, %v after the kill", plain.answers, killed.answers)
	}
}
