//go:build review

package disclosure_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// The catalog strategy's prompt section lists every tool of every group by name,
// however many there are: an MCP server that joins (or sends tools/list_changed)
// with thousands of tools grows the stable prefix of every request past the
// window, after the node's start-time check (CheckPromptFits) passed without it.
// The skills' section is bounded (skills.MaxPromptSection, 16 KiB); this one is
// not. Wanted: a bound like the skills' (names left out past it, with a count, the
// groups still listed so that load_tools can be asked for them). Not fixed here:
// the section is rebuilt from the catalog on replay, not recorded, so bounding it
// changes the prompts replay rebuilds for sessions recorded over large catalogs.
func TestCatalogSectionIsBounded(t *testing.T) {
	cat := &liveCatalog{}
	var ts []tools.Tool
	for s := range 5 {
		for i := range 800 {
			ts = append(ts, tool(fmt.Sprintf("server%d__operation_number_%04d", s, i), fmt.Sprintf("mcp:server%d", s), "Does one thing."))
		}
	}
	cat.set(ts...)
	d, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.PromptSection()); n > 16<<10 {
		t.Fatalf("the catalog's prompt section of 4,000 tools in 5 groups is %d bytes", n)
	}
}
