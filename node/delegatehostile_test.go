package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// Hostile delegate arguments: each is an error result the model can read, and no
// child starts.
func TestHostileDelegateArgumentsAreErrorResults(t *testing.T) {
	big := strings.Repeat("x", 1<<20+1)
	cases := []string{
		`{"agent":"helper","task":"` + big + `"}`,
		`{"agent":"helper","task":"   \n\t "}`,
		`{"agent":"Helper","task":"hi"}`,
		`{"agent":"helper\u0000","task":"hi"}`,
		`{"agent":"helper","task":"hi \xff\xfe there"}`,
		`{"agent":"helper","task":"hi","extra":1}`,
		`{"agent":null,"task":"hi"}`,
		`{"agent":"../../etc","task":"hi"}`,
		`{"agent":"default","task":"hi"}`,
		`{"agent":"helper","task":"hi \ud800 lone"}`,
		`not json`,
	}
	model := newByAgent(t, map[string][]llm.ScriptStep{"helper": helperScript})
	n := nodetest.Start(t, subagentsConfig(model))
	for i, args := range cases {
		model.set(t, "lead", llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "d1", Name: node.DelegateTool, Arguments: args}}}, llm.ScriptStep{Content: "carried on"})
		session := fmt.Sprintf("h%d", i)
		events := runAgentTask(t, n, node.Task{Input: "go", SessionID: session, Agent: "lead"})
		res := delegateResult(t, events)
		infos, _ := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true, Prefix: session + ".sub"})
		if events[len(events)-1].Type == messages.TypeTaskFailed {
			t.Logf("case %d: the parent failed: %.400s; events %s", i, events[len(events)-1].Payload, typesOf(events))
		}
		t.Logf("case %d (%.40q): result %.60q error %.200q; children %d; last %s", i, args, res.Result, res.Error, len(infos), events[len(events)-1].Type)
	}
}
