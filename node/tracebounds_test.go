package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// verboseFailure is a tool that fails with an error of a megabyte.
type verboseFailure struct{}

func (verboseFailure) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "verbose", Description: "fails at length"}
}

func (verboseFailure) Call(context.Context, tools.Call) (string, error) {
	return "", errors.New("stack dump: " + strings.Repeat("frame ", 1<<20/6))
}

// The spans a node exports are bounded whatever its tools and its model say: a
// tool's error of a megabyte, a tool name of 100,000 characters that the model made
// up. Before, both went whole into each span (its status, gen_ai.tool.name), and a
// batch of such spans exceeded what a collector takes in one request (4 MiB over
// gRPC by default): the whole batch, other tasks' spans with it, was refused.
func TestExportedSpansAreBounded(t *testing.T) {
	recv := newOTLPReceiver(t)
	setOTLPEnv(t, recv)
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "v", Name: "verbose", Arguments: `{}`}, {ID: "h", Name: strings.Repeat("x", 100_000), Arguments: `{}`}}},
		{Content: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{verboseFailure{}}})
	events := runAgentTask(t, n, node.Task{Input: "go", SessionID: "bounded"})
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	const bound = 8 << 10
	var failed bool
	for _, s := range recv.got() {
		if len(s.Status) > bound {
			t.Errorf("span %q: a status of %d bytes", s.Name, len(s.Status))
		}
		for k, v := range s.Attrs {
			if len(v) > bound {
				t.Errorf("span %q: attribute %s of %d bytes", s.Name, k, len(v))
			}
		}
		if s.Name == "execute_tool verbose" {
			failed = s.Error && strings.HasPrefix(s.Status, "stack dump: frame frame")
		}
	}
	if !failed {
		t.Error("the verbose tool's span has no error status that begins with its error")
	}
}
