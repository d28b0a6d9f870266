package node_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// BenchmarkParadigmStep runs the same task ("What is 12 * (7 + 5)?") through one
// embedded node per paradigm, each on a scripted model, against the
// function_calling loop in the same run:
//
//	function_calling  the calculator, then the answer (2 model calls)
//	react             the same in the ReAct text protocol (2)
//	simple            the answer in one call, no tools (1)
//	reflection        the calculator, the answer, a critique that passes (3)
//	team              an orchestrator whose rule hands the task to a
//	                  function_calling member in a child session (its 2 calls)
//
// "µs/step" and "allocs/step" are per model call, so the difference with
// function_calling is what the paradigm's fold, decide, prompt and (for a team)
// hand-over add to a step. plan_execute has its own (BenchmarkParadigmStepOverhead:
// its steps are tool calls).
func BenchmarkParadigmStep(b *testing.B) {
	calc := llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}}
	answer := llm.ScriptStep{Content: "144"}
	for _, c := range []struct {
		name   string
		script []llm.ScriptStep
		agents []node.NamedAgent
		steps  int
	}{
		{"function_calling", []llm.ScriptStep{calc, answer}, []node.NamedAgent{{Name: "a", Paradigm: node.ParadigmFunctionCalling}}, 2},
		{"react", []llm.ScriptStep{{Content: "Thought: compute it.\nAction: calculator[{\"expression\":\"12 * (7 + 5)\"}]"}, {Content: "Thought: done.\nFinish[144]"}},
			[]node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReAct}}, 2},
		{"simple", []llm.ScriptStep{answer}, []node.NamedAgent{{Name: "a", Paradigm: node.ParadigmSimple}}, 1},
		{"reflection", []llm.ScriptStep{calc, answer, {Content: `{"verdict": "pass"}`}}, []node.NamedAgent{{Name: "a", Paradigm: node.ParadigmReflection}}, 3},
		{"team", []llm.ScriptStep{calc, answer}, []node.NamedAgent{{Name: "worker"},
			{Name: "a", Team: &actors.Team{Pattern: actors.TeamOrchestrator, Members: []actors.TeamMember{{Name: "worker"}},
				Routes: []actors.TeamRoute{{Match: "what", Member: "worker"}}, Fallback: "worker"}}}, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			model, err := llm.NewScripted(llm.Script{Name: "bench", Steps: c.script})
			if err != nil {
				b.Fatal(err)
			}
			n := nodetest.Start(b, node.Config{Model: model, Agents: c.agents})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				runBenchTask(b, n, fmt.Sprintf("%s-%d", c.name, i), "a", "What is 12 * (7 + 5)?")
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*c.steps), "µs/step")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*c.steps), "allocs/step")
		})
	}
}
