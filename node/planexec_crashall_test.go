package node_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// tallies counts the performances of a tally tool by idempotency key.
type tallies struct {
	mu     sync.Mutex
	perKey map[string]int
}

// tool returns the tally tool, which answers "tallied N", and fails for an n of
// fail ("" fails for none).
func (c *tallies) tool(fail string) tools.Tool {
	c.mu.Lock()
	if c.perKey == nil {
		c.perKey = map[string]int{}
	}
	c.mu.Unlock()
	return tools.MustFunc("tally", "Counts n.", func(ctx context.Context, a struct {
		N string `json:"n"`
	}) (string, error) {
		c.mu.Lock()
		c.perKey[tools.CallKey(ctx)]++
		c.mu.Unlock()
		if fail != "" && a.N == fail {
			return "", fmt.Errorf("%s cannot be tallied", a.N)
		}
		return "tallied " + a.N, nil
	})
}

// performed returns the performances by key.
func (c *tallies) performed() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.perKey)
}

// crashEnded waits for session's task to end in l and returns its events.
func crashEnded(t *testing.T, l eventlog.Log, session string) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	waitFor(t, 10*time.Second, session+"'s task to end", func() bool {
		events = readAll(t, l, session)
		last := events[len(events)-1].Type
		return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
	})
	return events
}

// crashCase is a task run on a fresh world, then again from each prefix of its
// session's events.
type crashCase struct {
	agent, input, output string
	// world returns a fresh world's configuration on dir, its model and what its
	// tools performed, by key.
	world func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int)
	// check, when set, checks the resumed node.
	check func(t *testing.T, n *node.Node)
}

// A node that dies right after any event of a plan_execute task (parallel steps, a
// delegated step, a failed call, a re-plan): the node started next on its log
// finishes the task with the answer of an uninterrupted run, from the same prompt,
// performs no call whose result was recorded and asks no model whose answer was,
// and the session verifies.
func TestPlanExecuteCrashAfterEachEvent(t *testing.T) {
	plan := `{"steps":[{"id":"a","goal":"tally a","tool":"tally","args":{"n":"a"},"deps":[]},` +
		`{"id":"b","goal":"tally b","tool":"tally","args":{"n":"b"},"deps":[]},` +
		`{"id":"c","goal":"ask the helper","agent":"helper","deps":["a"]},` +
		`{"id":"d","goal":"tally d","tool":"tally","args":{"n":"d"},"deps":["a"]}],"answer":"say it"}`
	replan := `{"steps":[{"id":"a","goal":"tally a","tool":"tally","args":{"n":"a"},"deps":[]},` +
		`{"id":"b","goal":"tally b","tool":"tally","args":{"n":"b"},"deps":[]},` +
		`{"id":"c","goal":"ask the helper","agent":"helper","deps":["a"]},` +
		`{"id":"e","goal":"tally e","tool":"tally","args":{"n":"{{b}}"},"deps":["a","b"]}],"answer":"say it"}`
	runCrashCase(t, crashCase{agent: "planner", input: "tally", output: "all tallied",
		world: func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int) {
			c := &tallies{}
			m := newByAgent(t, map[string][]llm.ScriptStep{
				"planner": {{Content: plan}, {Content: replan}, {Content: "all tallied"}},
				"helper":  {{ToolCalls: []messages.ToolCall{{ID: "h1", Name: "tally", Arguments: `{"n":"h"}`}}}, {Content: "helped"}},
			})
			return node.Config{Model: m, DataDir: dir, Tools: []tools.Tool{tools.Calculator{}, c.tool("d")}, Agents: []node.NamedAgent{
				{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{"tally", node.DelegateTool}},
				{Name: "helper", Description: "helps", Tools: []string{"tally"}},
			}}, m, c.performed
		}})
}

// The same of a reflexion whose answer the evaluator judges poor: the lesson is
// stored once, whatever event the node died after.
func TestReflexionCrashAfterEachEvent(t *testing.T) {
	poor := `{"verdict": "revise", "issues": [{"issue": "no sources"}]}`
	lesson := `{"what_went_wrong": "no sources", "do_instead": "cite them"}`
	runCrashCase(t, crashCase{agent: "learner", input: "Describe tea.", output: "tea is nice",
		world: func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int) {
			m := newByAgent(t, map[string][]llm.ScriptStep{"learner": {{Content: "tea is nice"}, {Content: poor}, {Content: lesson}}})
			return node.Config{Model: m, DataDir: dir, Memory: &memory.Config{}, MemoryTool: &memory.ToolConfig{Namespace: "agent:learner"},
				Agents: []node.NamedAgent{{Name: "learner", Paradigm: node.ParadigmReflexion, Evaluate: true}}}, m, nil
		},
		check: func(t *testing.T, n *node.Node) {
			ns, err := n.Memories().Namespace(context.Background(), "lessons:learner")
			if err != nil {
				t.Fatal(err)
			}
			if got := ns.Snapshot(); len(got) != 1 {
				t.Errorf("lessons stored: %d, want 1", len(got))
			}
		}})
}

// And of a reflection, which revises once.
func TestReflectionCrashAfterEachEvent(t *testing.T) {
	revise := `{"verdict": "revise", "issues": [{"issue": "too vague"}]}`
	runCrashCase(t, crashCase{agent: "critic", input: "Describe tea.", output: "draft 2",
		world: func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int) {
			m := newByAgent(t, map[string][]llm.ScriptStep{"critic": {{Content: "draft 1"}, {Content: revise}, {Content: "draft 2"}, {Content: `{"verdict": "pass"}`}}})
			return node.Config{Model: m, DataDir: dir, Agents: []node.NamedAgent{{Name: "critic", Paradigm: node.ParadigmReflection}}}, m, nil
		}})
}

// runCrashCase runs c's task on a node, then, for each k, starts a node of a fresh
// world on a log holding the first k events of the session, as a node that died
// right after appending event k left it, and checks that it finishes the task as the
// uninterrupted run did. The streams the task's calls wrote (a child session, a
// memory namespace) are in that log when the session recorded their call's result,
// and are tried both ways when it recorded only the request: the node may have died
// before or after the call's performer wrote them.
func runCrashCase(t *testing.T, c crashCase) {
	ctx := context.Background()
	cfg, _, _ := c.world(t, t.TempDir())
	n := nodetest.Start(t, cfg)
	if _, err := n.Submit(ctx, node.Task{Input: c.input, SessionID: "s", Agent: c.agent}); err != nil {
		t.Fatal(err)
	}
	events := crashEnded(t, n.Log(), "s")
	if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != c.output {
		t.Fatalf("the uninterrupted run: %+v", events[len(events)-1])
	}
	lastPrompt := func(events []messages.Envelope) string {
		h := ""
		for _, r := range payloads[*messages.ModelRequested](t, events) {
			h = r.PromptHash
		}
		return h
	}
	want := lastPrompt(events)
	// The other streams of the log: the agents' configurations, and those the task
	// wrote through its calls (a child session, a memory namespace).
	infos, err := n.Log().Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	others := map[string][]messages.Envelope{}
	for _, s := range infos {
		if s.ID != "s" {
			others[s.ID] = readAll(t, n.Log(), s.ID)
		}
	}
	for k := 1; k < len(events); k++ {
		// The calls of the prefix that write other streams: requested, and answered.
		prefix := events[:k]
		requested, answered := 0, 0
		writes := map[string]bool{}
		for _, e := range prefix {
			p, _ := e.Decode()
			switch p := p.(type) {
			case *messages.ToolCallRequested:
				if p.Tool == node.DelegateTool || p.Purpose == actors.PurposeStoreLesson {
					writes[p.Key] = true
					requested++
				}
			case *messages.ToolCallCompleted:
				if writes[p.Key] {
					answered++
				}
			}
		}
		variants := []bool{answered > 0} // the streams written are in the log
		if requested > 0 && answered == 0 {
			variants = []bool{false, true}
		}
		for _, withEffects := range variants {
			t.Run(fmt.Sprintf("after-%d-%s-effects-%v", k, events[k-1].Type, withEffects), func(t *testing.T) {
				dir := t.TempDir()
				lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				// What the session, and the streams in the log, recorded the results of.
				recorded := map[string]bool{}
				note := func(evs []messages.Envelope) {
					for _, e := range evs {
						p, _ := e.Decode()
						switch p := p.(type) {
						case *messages.ToolCallCompleted:
							recorded[p.Key] = true
						case *messages.ModelResponded:
							recorded[p.Key] = true
						}
					}
				}
				note(prefix)
				for id, evs := range others {
					if !strings.HasPrefix(id, messages.ConfigStreamPrefix) {
						if !withEffects {
							continue
						}
						note(evs)
					}
					if err := lg.Append(ctx, evs); err != nil {
						t.Fatal(err)
					}
				}
				if err := lg.Append(ctx, prefix); err != nil {
					t.Fatal(err)
				}
				if err := lg.Close(); err != nil {
					t.Fatal(err)
				}
				cfg, model, performed := c.world(t, dir)
				n2 := nodetest.Start(t, cfg)
				got := crashEnded(t, n2.Log(), "s")
				if end := payloads[*messages.TaskCompleted](t, got); len(end) != 1 || end[0].Output != c.output {
					t.Fatalf("the end: %s %s", got[len(got)-1].Type, got[len(got)-1].Payload)
				}
				if h := lastPrompt(got); h != want {
					t.Errorf("the last prompt differs from the uninterrupted run's")
				}
				if performed != nil {
					for key, c := range performed() {
						if recorded[key] || c > 1 {
							t.Errorf("a tool performed %d times under %s (its result recorded before: %v)", c, key, recorded[key])
						}
					}
				}
				for call, c := range model.performed() {
					if recorded[call.key] || c > 1 {
						t.Errorf("model of %s asked %d times at step %d under %s (its answer recorded before: %v)", call.agent, c, call.step, call.key, recorded[call.key])
					}
				}
				all, err := cfg.AllAgents()
				if err != nil {
					t.Fatal(err)
				}
				if div, err := actors.VerifyAmong(all, got); err != nil || div != nil {
					t.Errorf("verify: %v %v", div, err)
				}
				if c.check != nil {
					c.check(t, n2)
				}
			})
		}
	}
}

// And of a plan whose goal step the agent's own loop works (calling a tool) while
// a tool step runs beside it.
func TestPlanGoalStepCrashAfterEachEvent(t *testing.T) {
	plan := `{"steps":[{"id":"g","goal":"find g","deps":[]},{"id":"t","goal":"tally t","tool":"tally","args":{"n":"t"},"deps":[]},` +
		`{"id":"u","goal":"use g","tool":"tally","args":{"n":"{{g}}"},"deps":["g","t"]}],"answer":"say it"}`
	runCrashCase(t, crashCase{agent: "planner", input: "go", output: "all done",
		world: func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int) {
			c := &tallies{}
			m := newByAgent(t, map[string][]llm.ScriptStep{"planner": {{Content: plan},
				{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "tally", Arguments: `{"n":"g"}`}, {ID: "c2", Name: "tally", Arguments: `{"n":"g2"}`}}},
				{Content: "g found"}, {Content: "all done"}}})
			return node.Config{Model: m, DataDir: dir, Tools: []tools.Tool{tools.Calculator{}, c.tool("")}, Agents: []node.NamedAgent{
				{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{"tally"}}}}, m, c.performed
		}})
}

// And of a ReAct agent, whose tool calls are lines of its model's text.
func TestReActCrashAfterEachEvent(t *testing.T) {
	runCrashCase(t, crashCase{agent: "reasoner", input: "tally twice", output: "both tallied",
		world: func(t *testing.T, dir string) (node.Config, *byAgent, func() map[string]int) {
			c := &tallies{}
			m := newByAgent(t, map[string][]llm.ScriptStep{"reasoner": {
				{Content: "Thought: tally a.\nAction: tally[{\"n\":\"a\"}]"},
				{Content: "Thought: tally b.\nAction: tally[{\"n\":\"b\"}]"},
				{Content: "Thought: done.\nFinish[both tallied]"}}})
			return node.Config{Model: m, DataDir: dir, Tools: []tools.Tool{tools.Calculator{}, c.tool("")}, Agents: []node.NamedAgent{
				{Name: "reasoner", Paradigm: node.ParadigmReAct, Tools: []string{"tally"}}}}, m, c.performed
		}})
}
