package disclosure_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// Under catalog, an MCP server of the tool catalog is one group: the first request
// offers the built-ins and load_tools, the system prompt lists the groups, and once
// the session's load_tools answer is recorded its requests offer the group's tools.
func ExampleDisclosure_Disclose() {
	cat := &liveCatalog{}
	cat.set(weatherTools()...)
	d, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		panic(err)
	}
	specs, section := d.Disclose(nil, actors.CatalogTools(cat))
	fmt.Println(names(specs))
	lines := strings.Split(strings.TrimSpace(section), "\n")
	fmt.Println(lines[len(lines)-1]) // one line per group

	var load tools.Tool
	for _, t := range d.Tools() {
		if t.Spec().Name == actors.ToolLoadTools {
			load = t
		}
	}
	res, err := load.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"group":"mcp:weather"}`})
	if err != nil {
		panic(err)
	}
	// The session records res; its next requests are disclosed with it.
	specs, _ = d.Disclose([]actors.ToolLoad{{Tool: actors.ToolLoadTools, Result: res}}, actors.CatalogTools(cat))
	fmt.Println(names(specs))
	// Output:
	// calculator,load_tools
	// - mcp:weather (2 tools): weather__alerts, weather__forecast
	// calculator,load_tools,weather__alerts,weather__forecast
}
