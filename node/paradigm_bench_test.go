package node_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// BenchmarkParadigmStep runs the same task through one embedded node as a
// function_calling agent (two model calls: the calculator, the answer) and as a
// reflection agent (the same two, then a critique that passes): "µs/step" and
// "allocs/step" are per model call, so the difference is what the paradigm's
// fold, decide and prompt add to a step.
func BenchmarkParadigmStep(b *testing.B) {
	model, err := llm.NewScripted(llm.Script{Name: "bench", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}},
		{Content: "144"},
		{Content: `{"verdict": "pass"}`},
	}})
	if err != nil {
		b.Fatal(err)
	}
	n := nodetest.Start(b, node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "fc", Paradigm: node.ParadigmFunctionCalling},
		{Name: "reviewer", Paradigm: node.ParadigmReflection},
	}})
	for _, c := range []struct {
		agent string
		steps int
	}{{"fc", 2}, {"reviewer", 3}} {
		b.Run(c.agent, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				runParadigmTask(b, n, fmt.Sprintf("%s-%d", c.agent, i), c.agent)
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*c.steps), "µs/step")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*c.steps), "allocs/step")
		})
	}
}

func runParadigmTask(b *testing.B, n *node.Node, id, agent string) {
	events, stop := n.Watch(id)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: id, Agent: agent}); err != nil {
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
