package node_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// A tool whose name holds a credential's shape after its server's prefix
// ("ml__sk-learn-…", an "sk-" key's) is found by search_tools and offered next: the
// recorded answer of search_tools was redacted to "ml__[REDACTED]", so the session
// folded a load of no tool and the model read no name it could call.
func TestSearchLoadsAToolNamedLikeAKey(t *testing.T) {
	rec := &requestLog{}
	cfg := node.Config{Tools: []tools.Tool{tools.Calculator{}, serverTool{"ml__sk-learn-linear-regression", "ml"}}, Disclosure: disclosure.Search,
		Model: rec.model(t, call("c1", "search_tools", `{"query":"linear regression"}`), llm.ScriptStep{Content: "found"})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "sk-shaped", "fit a line")
	_, names, _ := rec.get()
	if len(names) != 2 || names[1] != "calculator,call_tool,ml__sk-learn-linear-regression,search_tools" {
		t.Errorf("requests offered %v", names)
	}
	if r := toolResults(t, events)["c1"]; r.Result != `{"query":"linear regression","loaded":["ml__sk-learn-linear-regression"],"note":"best match first; these tools are in your tool list now (call_tool calls them too)"}` {
		t.Errorf("search_tools = %+v", r)
	}
}
