package disclosure_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// callAs calls the strategy's tool name for agent.
func callAs(t *testing.T, d *disclosure.Disclosure, agent, name, args string) (string, error) {
	t.Helper()
	for _, tl := range d.Tools() {
		if tl.Spec().Name == name {
			return tl.Call(context.Background(), tools.Call{Key: "sess/7", Arguments: args, Agent: agent})
		}
	}
	t.Fatalf("no tool %s", name)
	return "", nil
}

// gitLogOnly is the scope of an agent "reader" whose tools are git_log alone.
func gitLogOnly(agent string) func(string) bool {
	if agent != "reader" {
		return nil
	}
	return func(name string) bool { return name == "git_log" }
}

// Under a scope, the strategy's tools see for an agent only its tools: call_tool
// refuses any other, search_tools finds none other and load_tools loads none other;
// an agent the scope does not bound sees every tool.
func TestScopeBoundsWhatAnAgentSees(t *testing.T) {
	for _, s := range []disclosure.Strategy{disclosure.Search, disclosure.Catalog} {
		d, err := disclosure.New(s, catalogTools(), disclosure.WithScope(gitLogOnly))
		if err != nil {
			t.Fatal(err)
		}
		if s == disclosure.Catalog {
			if out, err := callAs(t, d, "reader", "load_tools", `{"group":"mcp:git"}`); err != nil || !strings.Contains(out, `"loaded":["git_log"]`) {
				t.Fatalf("load_tools of mcp:git for reader = %s, %v; want git_log alone", out, err)
			}
			if _, err := callAs(t, d, "reader", "load_tools", `{"group":"mcp:calendar"}`); err == nil || strings.Contains(err.Error(), "mcp:calendar,") {
				t.Fatalf("load_tools of mcp:calendar for reader = %v; want no such group", err)
			}
			if out, err := callAs(t, d, "", "load_tools", `{"group":"mcp:git"}`); err != nil || !strings.Contains(out, `"loaded":["git_commit","git_log"]`) {
				t.Fatalf("load_tools of mcp:git for the default agent = %s, %v; want both", out, err)
			}
			continue
		}
		if _, err := callAs(t, d, "reader", "call_tool", `{"name":"git_commit","arguments":{}}`); err == nil || !strings.Contains(err.Error(), `"git_commit" is not a tool of this agent`) {
			t.Fatalf("call_tool of git_commit for reader: %v; want refused", err)
		}
		if out, err := callAs(t, d, "reader", "call_tool", `{"name":"git_log","arguments":{}}`); err != nil || !strings.HasPrefix(out, "git_log") {
			t.Fatalf("call_tool of git_log for reader = %s, %v", out, err)
		}
		if out, err := callAs(t, d, "", "call_tool", `{"name":"git_commit","arguments":{}}`); err != nil || !strings.HasPrefix(out, "git_commit") {
			t.Fatalf("call_tool of git_commit for the default agent = %s, %v", out, err)
		}
		if out, err := callAs(t, d, "reader", "search_tools", `{"query":"git commit repository"}`); err != nil || !strings.Contains(out, `"loaded":["git_log"]`) {
			t.Fatalf("search_tools for reader = %s, %v; want git_log alone", out, err)
		}
		if out, err := callAs(t, d, "", "search_tools", `{"query":"git commit repository"}`); err != nil || !strings.Contains(out, "git_commit") {
			t.Fatalf("search_tools for the default agent = %s, %v; want git_commit among them", out, err)
		}
	}
}
