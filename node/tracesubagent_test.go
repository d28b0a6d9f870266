package node_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestSubagentSpansAreInTheParentsTrace: a task whose agent delegates to a
// sub-agent, with traces exported by OTLP/HTTP as the OTEL_* environment says: the
// child session's spans are in the parent's trace, its task under the parent's
// delegate call, and its own calls under its own steps.
func TestSubagentSpansAreInTheParentsTrace(t *testing.T) {
	recv := newOTLPReceiver(t)
	setOTLPEnv(t, recv)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "the helper says 42"}},
		"helper": helperScript,
	})
	n := nodetest.Start(t, subagentsConfig(model))
	runAgentTask(t, n, node.Task{Input: "Ask the helper for 6*7.", SessionID: "boss", Agent: "lead", DeadlineMS: 60_000})
	waitCompleted(t, n, []string{"boss.sub4"}, 10*time.Second)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	byID := map[string]gotSpan{}
	byName := map[string][]gotSpan{}
	for _, s := range recv.got() {
		byID[s.SpanID] = s
		byName[s.Name] = append(byName[s.Name], s)
	}
	lead, helper, delegate := byName["invoke_agent lead"], byName["invoke_agent helper"], byName["execute_tool "+node.DelegateTool]
	if len(lead) != 1 || len(helper) != 1 || len(delegate) != 1 {
		t.Fatalf("spans: %v", keys(byName))
	}
	for _, s := range recv.got() {
		if s.TraceID != lead[0].TraceID {
			t.Errorf("span %q (session %s) in trace %s, want the parent task's %s", s.Name, s.Attrs["gen_ai.conversation.id"], s.TraceID, lead[0].TraceID)
		}
	}
	// The helper's task is under the lead's delegate call, through the submit span
	// of the child's task.
	chain := []string{}
	for id := helper[0].Parent; id != "" && len(chain) < 10; id = byID[id].Parent {
		chain = append(chain, byID[id].Name)
		if id == delegate[0].SpanID {
			break
		}
	}
	if len(chain) == 0 || chain[len(chain)-1] != delegate[0].Name {
		t.Errorf("the helper's task's ancestors %v do not reach the lead's delegate call", chain)
	}
	calc := byName["execute_tool calculator"]
	if len(calc) != 1 || byID[calc[0].Parent].Name != "step 1" || byID[byID[calc[0].Parent].Parent].SpanID != helper[0].SpanID {
		t.Errorf("the helper's calculator call is not under its step 1: %+v", calc)
	}
}
