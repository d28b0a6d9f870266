package disclosure_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// liveCatalog is an actors.ToolCatalog whose tools the test changes, as an MCP
// server's join and leave.
type liveCatalog struct {
	mu    sync.Mutex
	specs []messages.ToolSpec
	tools map[string]tools.Tool
}

func (c *liveCatalog) set(ts ...tools.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.specs, c.tools = nil, map[string]tools.Tool{}
	for _, t := range ts {
		c.specs = append(c.specs, t.Spec())
		c.tools[t.Spec().Name] = t
	}
	slices.SortFunc(c.specs, func(a, b messages.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
}

func (c *liveCatalog) Specs() []messages.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.specs
}

func (c *liveCatalog) Tool(name string) (tools.Tool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tools[name]
	return t, ok
}

var _ actors.ToolCatalog = (*liveCatalog)(nil)

func weatherTools() []tools.Tool {
	return []tools.Tool{
		tool("weather__forecast", "mcp:weather", "Forecast the weather of a city for the next days"),
		tool("weather__alerts", "mcp:weather", "List the storm and heat alerts of a region"),
	}
}

func loaded(t *testing.T, res string) []string {
	t.Helper()
	var r struct{ Loaded []string }
	if err := json.Unmarshal([]byte(res), &r); err != nil {
		t.Fatalf("result %q: %v", res, err)
	}
	return r.Loaded
}

// search_tools searches the catalog as it is when it is called, call_tool calls its
// tools, and what a session loaded from it is offered while the catalog has it.
func TestSearchFollowsTheCatalog(t *testing.T) {
	cat := &liveCatalog{}
	d, err := disclosure.New(disclosure.Search, catalogTools(), disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	search := func() string {
		t.Helper()
		res, err := callNamed(t, d, actors.ToolSearchTools, `{"query":"weather forecast for a city","limit":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if got := loaded(t, search()); slices.Contains(got, "weather__forecast") {
		t.Fatalf("found %v before the server joined", got)
	}
	if !strings.Contains(d.PromptSection(), "4 more tools") {
		t.Errorf("section before: %q", d.PromptSection())
	}

	cat.set(weatherTools()...)
	res := search()
	if got := loaded(t, res); !slices.Equal(got, []string{"weather__forecast"}) {
		t.Fatalf("search after the server joined loaded %v", got)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: res}}
	specs, section := d.Disclose(loads, actors.CatalogTools(cat))
	if got := names(specs); got != "calculator,call_tool,search_tools,weather__forecast" {
		t.Errorf("offer = %s", got)
	}
	if !strings.Contains(section, "6 more tools") || !strings.Contains(section, "mcp:weather") {
		t.Errorf("section = %q", section)
	}
	out, err := callNamed(t, d, disclosure.ToolCallTool, `{"name":"weather__alerts","arguments":{"region":"north"}}`)
	if err != nil || out != `weather__alerts key=sess/7 args={"region":"north"}` {
		t.Errorf("call_tool = %q, %v", out, err)
	}

	// The server leaves: its tool is neither offered nor callable any more.
	cat.set()
	specs, _ = d.Disclose(loads, actors.CatalogTools(cat))
	if got := names(specs); got != "calculator,call_tool,search_tools" {
		t.Errorf("offer after the server left = %s", got)
	}
	if _, err := callNamed(t, d, disclosure.ToolCallTool, `{"name":"weather__alerts"}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("call_tool of a tool that left = %v", err)
	}
}

// The catalog strategy lists the catalog's servers as groups; load_tools loads one,
// and it stays loaded as the server's tools change.
func TestCatalogGroupsFollowTheCatalog(t *testing.T) {
	cat := &liveCatalog{}
	d, err := disclosure.New(disclosure.Catalog, catalogTools(), disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callNamed(t, d, actors.ToolLoadTools, `{"group":"mcp:weather"}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("loading a group not yet in the catalog: %v", err)
	}
	// A catalog tool named like one of the agent's is left out; one without a
	// source is in the group "catalog".
	cat.set(append(weatherTools(), tool("git_log", "mcp:other", "a clash"), plainTool{"ping"})...)
	if got := strings.Join(d.Groups(), ","); got != "catalog,mcp:calendar,mcp:git,mcp:weather" {
		t.Errorf("groups = %s", got)
	}
	section := d.PromptSection()
	for _, line := range []string{"- mcp:weather (2 tools): weather__alerts, weather__forecast\n", "- mcp:git (2 tools): git_commit, git_log\n", "- catalog (1 tools): ping\n"} {
		if !strings.Contains(section, line) {
			t.Errorf("section lacks %q:\n%s", line, section)
		}
	}
	res, err := callNamed(t, d, actors.ToolLoadTools, `{"group":"mcp:weather"}`)
	if err != nil {
		t.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolLoadTools, Result: res}}
	specs, got := d.Disclose(loads, actors.CatalogTools(cat))
	if names(specs) != "calculator,load_tools,weather__alerts,weather__forecast" || got != section {
		t.Errorf("after load: %s\n%s", names(specs), got)
	}
	for _, s := range specs {
		if s.Name == "git_log" {
			t.Errorf("the catalog's git_log displaced the agent's")
		}
	}
	// A loaded group stays loaded whole: a tool its server adds later is offered.
	cat.set(append(weatherTools(), tool("weather__radar", "mcp:weather", "Show the rain radar"))...)
	if specs, _ := d.Disclose(loads, actors.CatalogTools(cat)); names(specs) != "calculator,load_tools,weather__alerts,weather__forecast,weather__radar" {
		t.Errorf("after the server added a tool: %s", names(specs))
	}
	cat.set()
	if got := strings.Join(d.Groups(), ","); got != "mcp:calendar,mcp:git" {
		t.Errorf("groups after the server left = %s", got)
	}
}

type plainTool struct{ name string }

func (p plainTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: p.name, Description: "answers pong", Parameters: json.RawMessage(`{"type":"object"}`)}
}
func (plainTool) Call(context.Context, tools.Call) (string, error) { return "pong", nil }

// Disclose depends on the loads and the catalog it is given, nothing else: not on
// the catalogs it saw before, not on which Disclosure answers.
func TestDiscloseIsPureInTheCatalog(t *testing.T) {
	a := mustNew(t, disclosure.Search, catalogTools())
	b := mustNew(t, disclosure.Search, catalogTools())
	one := weatherTools()
	two := append(weatherTools(), tool("maps__route", "mcp:maps", "Plan a route between two places"))
	loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: `{"loaded":["weather__alerts","maps__route","git_log"]}`}}
	disclose := func(d *disclosure.Disclosure, cat []tools.Tool) string {
		specs, section := d.Disclose(loads, cat)
		j, err := json.Marshal(specs)
		if err != nil {
			t.Fatal(err)
		}
		return string(j) + "\n" + section
	}
	first := disclose(a, one)
	if got := disclose(a, two); got == first || !strings.Contains(got, "maps__route") {
		t.Errorf("the catalog's change did not show:\n%s", got)
	}
	if got := disclose(a, one); got != first {
		t.Errorf("the same catalog gave other bytes:\n%s\n%s", first, got)
	}
	if got := disclose(b, one); got != first {
		t.Errorf("another disclosure gave other bytes:\n%s\n%s", first, got)
	}
	// The same specs from new tool values (a server that reconnected) give the same bytes.
	if got := disclose(a, weatherTools()); got != first {
		t.Errorf("equal catalogs gave other bytes:\n%s\n%s", first, got)
	}
	if got := disclose(a, nil); strings.Contains(got, "weather") {
		t.Errorf("no catalog still offers its tools:\n%s", got)
	}
}

// Sessions disclose at once while the catalog changes: each gets the disclosure of
// the catalog it handed over, whole.
func TestDiscloseWhileTheCatalogChanges(t *testing.T) {
	cat := &liveCatalog{}
	d, err := disclosure.New(disclosure.Catalog, catalogTools(), disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolLoadTools, Result: `{"loaded":["weather__alerts","weather__forecast"]}`}}
	with, without := weatherTools(), []tools.Tool(nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				cat := without
				if (i+w)%2 == 0 {
					cat = with
				}
				specs, section := d.Disclose(loads, cat)
				want := "calculator,load_tools"
				if len(cat) > 0 {
					want += ",weather__alerts,weather__forecast"
				}
				if got := names(specs); got != want {
					t.Errorf("catalog of %d tools: offered %s", len(cat), got)
					return
				}
				if strings.Contains(section, "mcp:weather") != (len(cat) > 0) {
					t.Errorf("catalog of %d tools: section %q", len(cat), section)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			if i%2 == 0 {
				cat.set(with...)
			} else {
				cat.set()
			}
			_ = d.PromptSection()
		}
	})
	wg.Wait()
}
