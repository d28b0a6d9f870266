package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// The plan_execute benchmarks run whole tasks through an embedded node (session
// actor, effects, SQLite log) with a scripted model and a scripted tool.

// sleepTool answers after a fixed latency (0: at once).
type sleepTool struct{ latency time.Duration }

func (sleepTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "work", Description: "does a unit of work", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (s sleepTool) Call(ctx context.Context, c tools.Call) (string, error) {
	if s.latency > 0 {
		select {
		case <-time.After(s.latency):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return "done " + c.Arguments, nil
}

// dagSteps is a 20-step DAG of four independent branches: each has four steps of
// its own that depend on nothing, and a fifth that joins them.
const dagSteps = 20

func dagPlan() string {
	var steps []string
	for b := 1; b <= 4; b++ {
		var deps []string
		for i := 1; i <= 4; i++ {
			id := fmt.Sprintf("b%d_%d", b, i)
			deps = append(deps, `"`+id+`"`)
			steps = append(steps, fmt.Sprintf(`{"id": %q, "tool": "work", "args": {"n": %q}, "deps": []}`, id, id))
		}
		steps = append(steps, fmt.Sprintf(`{"id": "b%d_join", "tool": "work", "args": {"of": "{{b%d_1}}"}, "deps": [%s]}`, b, b, strings.Join(deps, ", ")))
	}
	return `{"steps": [` + strings.Join(steps, ", ") + `]}`
}

func benchModel(b *testing.B, steps ...llm.ScriptStep) llm.Model {
	b.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "bench", Steps: steps})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// runBenchTask runs one task of agent in a new session and fails b unless it
// completes.
func runBenchTask(b *testing.B, n *node.Node, id, agent, input string) {
	events, stop := n.Watch(id)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: id, Agent: agent}); err != nil {
		b.Fatal(err)
	}
	for e := range events {
		switch e.Type {
		case messages.TypeTaskCompleted:
			return
		case messages.TypeTaskFailed:
			b.Fatalf("task failed: %s", e.Payload)
		}
	}
	b.Fatal("event feed closed")
}

// BenchmarkPlanExecuteFanOut runs the 20-step DAG with a tool of 20 ms, by an agent
// whose concurrency bound is 1 and by one whose bound is 8, one task each per
// iteration: "speedup" is the first's wall time over the second's.
func BenchmarkPlanExecuteFanOut(b *testing.B) {
	n := nodetest.Start(b, node.Config{
		Model:            benchModel(b, llm.ScriptStep{Content: dagPlan()}, llm.ScriptStep{Content: "all done"}),
		Tools:            []tools.Tool{sleepTool{latency: 20 * time.Millisecond}},
		MaxParallelTools: 8,
		MaxSteps:         10,
		Agents: []node.NamedAgent{
			{Name: "c1", Paradigm: node.ParadigmPlanExecute, PlanExecute: actors.PlanExecute{Concurrency: 1}},
			{Name: "c8", Paradigm: node.ParadigmPlanExecute, PlanExecute: actors.PlanExecute{Concurrency: 8}},
		},
	})
	var one, eight time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		runBenchTask(b, n, fmt.Sprintf("c1-%d", i), "c1", "do the work")
		mid := time.Now()
		runBenchTask(b, n, fmt.Sprintf("c8-%d", i), "c8", "do the work")
		one, eight = one+mid.Sub(start), eight+time.Since(mid)
	}
	b.ReportMetric(float64(one.Milliseconds())/float64(b.N), "ms@1")
	b.ReportMetric(float64(eight.Milliseconds())/float64(b.N), "ms@8")
	b.ReportMetric(float64(one)/float64(eight), "speedup")
}

// BenchmarkParadigmStepOverhead runs 20 tool calls that answer at once, as the
// function-calling loop does them (one model reply asks for all 20, then the model
// answers) and as a plan_execute agent does them (a plan of 20 independent steps,
// then the answer call): the same model calls and tool calls, so "µs/step" and
// allocations per tool step tell the paradigms' own costs apart.
func BenchmarkParadigmStepOverhead(b *testing.B) {
	var calls []messages.ToolCall
	var steps []string
	for i := 1; i <= dagSteps; i++ {
		calls = append(calls, messages.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "work", Arguments: fmt.Sprintf(`{"n":%d}`, i)})
		steps = append(steps, fmt.Sprintf(`{"id": "s%d", "tool": "work", "args": {"n": %d}, "deps": []}`, i, i))
	}
	for _, c := range []struct {
		name  string
		model llm.Model
		agent node.NamedAgent
	}{
		{"function_calling", benchModel(b, llm.ScriptStep{ToolCalls: calls}, llm.ScriptStep{Content: "all done"}), node.NamedAgent{Name: "a"}},
		{"plan_execute", benchModel(b, llm.ScriptStep{Content: `{"steps": [` + strings.Join(steps, ", ") + `]}`}, llm.ScriptStep{Content: "all done"}),
			node.NamedAgent{Name: "a", Paradigm: node.ParadigmPlanExecute, PlanExecute: actors.PlanExecute{Concurrency: 8}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := nodetest.Start(b, node.Config{Model: c.model, Tools: []tools.Tool{sleepTool{}}, MaxParallelTools: 8, Agents: []node.NamedAgent{c.agent}})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				runBenchTask(b, n, fmt.Sprintf("t-%d", i), "a", "do the work")
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*dagSteps), "µs/step")
		})
	}
}
