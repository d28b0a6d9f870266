package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// doubleChain doubles a number with the calculator.
var doubleChain = tools.Chain{
	Name: "double", Description: "Doubles a number.",
	InputSchema: []byte(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`),
	Steps:       []tools.ChainStep{{Name: "calc", Tool: "calculator", Args: `{"expression": "{{.args.n}} * 2"}`}},
}

// A named agent given a chain but not the tools its steps call could never run
// it: each call would end at its first step with "unknown tool". The node refuses
// it when it starts, naming the agent, the chain, the step and the tool, as it
// refuses a chain whose step calls a tool the node does not have.
func TestNamedAgentWithAChainButNotItsStepsToolsIsRefused(t *testing.T) {
	cfg := node.Config{DataDir: t.TempDir(), Chains: []tools.Chain{doubleChain},
		Agents: []node.NamedAgent{{Name: "doubler", Tools: []string{"double"}}}}
	_, err := node.New(context.Background(), cfg)
	if err == nil {
		t.Fatal("the node started with an agent that cannot run its chain")
	}
	for _, want := range []string{`agent "doubler"`, `chain "double"`, `step "calc"`, `"calculator"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %s", err, want)
		}
	}
	// With the step's tool too, it runs.
	cfg.Agents[0].Tools = []string{"double", "calculator"}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}
