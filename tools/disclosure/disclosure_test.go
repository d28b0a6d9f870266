package disclosure_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// sourcedTool is a tool from a given source that answers with its name, key and
// arguments.
type sourcedTool struct {
	spec   messages.ToolSpec
	source string
}

func (t sourcedTool) Spec() messages.ToolSpec { return t.spec }
func (t sourcedTool) Source() string          { return t.source }
func (t sourcedTool) Call(_ context.Context, c tools.Call) (string, error) {
	return fmt.Sprintf("%s key=%s args=%s", t.spec.Name, c.Key, c.Arguments), nil
}

func tool(name, source, description string) sourcedTool {
	return sourcedTool{spec: messages.ToolSpec{Name: name, Description: description,
		Parameters: json.RawMessage("{\n \"type\": \"object\"\n}")}, source: source}
}

func catalogTools() []tools.Tool {
	return []tools.Tool{
		tool("git_log", "mcp:git", "Show the commit history of a repository"),
		tools.Calculator{},
		tool("git_commit", "mcp:git", "Record staged changes to the repository as a new commit with a message"),
		tool("cal_create_event", "mcp:calendar", "Create a calendar event with a title, start and end time"),
		tool("cal_list_events", "mcp:calendar", "List the calendar events of a day"),
	}
}

func names(specs []messages.ToolSpec) string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	return strings.Join(n, ",")
}

func mustNew(t *testing.T, s disclosure.Strategy, ts []tools.Tool) *disclosure.Disclosure {
	t.Helper()
	d, err := disclosure.New(s, ts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func callNamed(t *testing.T, d *disclosure.Disclosure, name, args string) (string, error) {
	t.Helper()
	for _, tl := range d.Tools() {
		if tl.Spec().Name == name {
			return tl.Call(context.Background(), tools.Call{Key: "sess/7", Arguments: args})
		}
	}
	t.Fatalf("no tool %s", name)
	return "", nil
}

func TestAllOffersEveryTool(t *testing.T) {
	d := mustNew(t, disclosure.All, catalogTools())
	if got := names(d.Offer(nil)); got != "cal_create_event,cal_list_events,calculator,git_commit,git_log" {
		t.Errorf("offer = %s", got)
	}
	if d.PromptSection() != "" {
		t.Errorf("section = %q", d.PromptSection())
	}
}

func TestCatalogLoadsAGroup(t *testing.T) {
	d := mustNew(t, disclosure.Catalog, catalogTools())
	if got := names(d.Offer(nil)); got != "calculator,load_tools" {
		t.Fatalf("first offer = %s", got)
	}
	section := d.PromptSection()
	for _, line := range []string{"- mcp:calendar (2 tools): cal_create_event, cal_list_events\n", "- mcp:git (2 tools): git_commit, git_log\n"} {
		if !strings.Contains(section, line) {
			t.Errorf("section lacks %q:\n%s", line, section)
		}
	}
	res, err := callNamed(t, d, actors.ToolLoadTools, `{"group":"mcp:git"}`)
	if err != nil {
		t.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolLoadTools, Result: res}}
	if got := names(d.Offer(loads)); got != "calculator,git_commit,git_log,load_tools" {
		t.Errorf("offer after load = %s (result %s)", got, res)
	}
	// Garbage and unknown names in a recorded result load nothing.
	loads = append(loads, actors.ToolLoad{Tool: actors.ToolLoadTools, Result: "not json"}, actors.ToolLoad{Tool: actors.ToolLoadTools, Result: `{"loaded":["gone"]}`})
	if got := names(d.Offer(loads)); got != "calculator,git_commit,git_log,load_tools" {
		t.Errorf("offer = %s", got)
	}
	_, err = callNamed(t, d, actors.ToolLoadTools, `{"group":"mcp:nope"}`)
	if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "mcp:calendar, mcp:git") {
		t.Errorf("unknown group: %v", err)
	}
}

// The tools offered are sorted and byte-identical whatever order the tools came in
// and however often the same loads are offered.
func TestOfferIsByteStable(t *testing.T) {
	ts := catalogTools()
	rev := make([]tools.Tool, len(ts))
	for i, tl := range ts {
		rev[len(ts)-1-i] = tl
	}
	a, b := mustNew(t, disclosure.Search, ts), mustNew(t, disclosure.Search, rev)
	res, err := callNamed(t, a, actors.ToolSearchTools, `{"query":"new calendar event"}`)
	if err != nil {
		t.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: res}}
	x, _ := json.Marshal(a.Offer(loads))
	y, _ := json.Marshal(b.Offer(loads))
	z, _ := json.Marshal(a.Offer(loads))
	if string(x) != string(y) || string(x) != string(z) {
		t.Fatalf("offers differ:\n%s\n%s\n%s", x, y, z)
	}
	if strings.Contains(string(x), "\n") {
		t.Errorf("schemas not compacted: %s", x)
	}
	if a.PromptSection() != b.PromptSection() {
		t.Error("prompt sections differ")
	}
}

func TestSearchFindsAndLoadsTheRightTool(t *testing.T) {
	d := mustNew(t, disclosure.Search, catalogTools())
	if got := names(d.Offer(nil)); got != "calculator,call_tool,search_tools" {
		t.Fatalf("first offer = %s", got)
	}
	for query, want := range map[string]string{
		"save my staged changes as a commit": "git_commit",
		"show the history of commits":        "git_log",
		"create an event in my calendar":     "cal_create_event",
		"which events do I have today":       "cal_list_events",
	} {
		res, err := callNamed(t, d, actors.ToolSearchTools, `{"query":`+fmt.Sprintf("%q", query)+`,"limit":1}`)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Loaded []string }
		if err := json.Unmarshal([]byte(res), &r); err != nil || len(r.Loaded) != 1 || r.Loaded[0] != want {
			t.Errorf("%q: %s, want %s", query, res, want)
		}
		if got := names(d.Offer([]actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: res}})); !strings.Contains(got, want) {
			t.Errorf("%q: offer %s lacks %s", query, got, want)
		}
	}
	for _, args := range []string{`{"query":""}`, `{"query":"x","limit":50}`, `{"q":"x"}`} {
		if _, err := callNamed(t, d, actors.ToolSearchTools, args); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s: %v", args, err)
		}
	}
}

// call_tool calls a tool of the catalog with the call's key, and nothing else.
func TestCallToolStaysInTheCatalog(t *testing.T) {
	d := mustNew(t, disclosure.Search, catalogTools())
	out, err := callNamed(t, d, disclosure.ToolCallTool, `{"name":"git_commit","arguments":{"message":"fix"}}`)
	if err != nil || out != `git_commit key=sess/7 args={"message":"fix"}` {
		t.Errorf("call_tool = %q, %v", out, err)
	}
	if out, err := callNamed(t, d, disclosure.ToolCallTool, `{"name":"calculator","arguments":{"expression":"2+3"}}`); err != nil || out != "5" {
		t.Errorf("calculator through call_tool = %q, %v", out, err)
	}
	for _, name := range []string{"rm_rf", "search_tools", "call_tool", ""} {
		_, err := callNamed(t, d, disclosure.ToolCallTool, `{"name":"`+name+`"}`)
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "not a tool of this agent") {
			t.Errorf("call_tool(%q) = %v", name, err)
		}
	}
}

func TestNewRefusesClashingNames(t *testing.T) {
	if _, err := disclosure.New(disclosure.Catalog, []tools.Tool{tool("load_tools", "mcp:x", "mine")}); err == nil {
		t.Error("a tool named load_tools was accepted")
	}
	if _, err := disclosure.New("lazy", nil); err == nil {
		t.Error("an unknown strategy was accepted")
	}
}

func TestTokenize(t *testing.T) {
	got := strings.Join(disclosure.Tokenize("createCalendarEvents: Creating the new_events, updated"), " ")
	if got != "creat calendar event creat new event updat" {
		t.Errorf("tokens = %q", got)
	}
}
