package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// The agent-loop benchmarks run one two-step task (the model calls the calculator,
// then answers) through a bare Go loop and through a whole embedded node (bus, session
// actor, model and tool actors, SQLite log). Compare them with benchstat; "µs/step"
// is per model call.

func benchScript(b *testing.B) *llm.Scripted {
	b.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "bench", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}},
		{Content: "144"},
	}})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

const stepsPerTask = 2

// BenchmarkLoopBare is the baseline: the same model and tool calls in a plain loop,
// with the conversation kept in a slice and nothing recorded.
func BenchmarkLoopBare(b *testing.B) {
	model := benchScript(b)
	calc := tools.Calculator{}
	ctx := context.Background()
	specs := []messages.ToolSpec{calc.Spec()}
	b.ReportAllocs()
	for b.Loop() {
		msgs := []messages.ChatMessage{{Role: messages.RoleSystem, Content: node.DefaultSystemPrompt}, {Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}}
		for step := 1; ; step++ {
			r, err := model.Generate(ctx, llm.Request{Step: step, Messages: msgs, Tools: specs})
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, r.Message)
			if len(r.Message.ToolCalls) == 0 {
				break
			}
			for _, c := range r.Message.ToolCalls {
				out, err := calc.Call(ctx, tools.Call{Key: c.ID, Arguments: c.Arguments})
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, messages.ChatMessage{Role: messages.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: out})
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*stepsPerTask), "µs/step")
}

// benchNode starts the benchmarks' node and runs one task through it, untimed, so
// that what a process loads once (the tokenizer's tables, the actors' first
// spawns) is not counted in the first run's figures per task.
func benchNode(b *testing.B) *node.Node {
	b.Helper()
	n := nodetest.Start(b, node.Config{Model: benchScript(b)})
	runTask(b, n, "bench-warm-up")
	return n
}

func runTask(b *testing.B, n *node.Node, id string) {
	events, stop := n.Watch(id)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: id}); err != nil {
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

// BenchmarkLoopNode runs tasks one after another through an embedded node: the
// latency of a step with every hop and a durable write.
func BenchmarkLoopNode(b *testing.B) {
	n := benchNode(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		runTask(b, n, fmt.Sprintf("bench-%d", i))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*stepsPerTask), "µs/step")
}

// BenchmarkLoopNodeConcurrent runs 64 sessions at a time through one node: the
// throughput of steps when the log can group commits.
func BenchmarkLoopNodeConcurrent(b *testing.B) {
	n := benchNode(b)
	const workers = 64
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				runTask(b, n, fmt.Sprintf("bench-%d", i))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*stepsPerTask)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*stepsPerTask), "µs/step")
}
