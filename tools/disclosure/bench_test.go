package disclosure_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// BenchmarkDisclose is the cost Disclose adds to each model request of a session that
// searched once, with 175 catalog tools over 7 servers: over an unchanged catalog
// (the view is reused) and over a catalog that changed since the last request (the
// groups, the index and the section are made again).
func BenchmarkDisclose(b *testing.B) {
	var ts []tools.Tool
	for i := range 175 {
		srv := fmt.Sprintf("srv%d", i%7)
		ts = append(ts, tool(fmt.Sprintf("%s__tool_%03d", srv, i), "mcp:"+srv, fmt.Sprintf("Does thing number %d of the server %s with care", i, srv)))
	}
	cat := &liveCatalog{}
	cat.set(ts...)
	d, err := disclosure.New(disclosure.Search, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		b.Fatal(err)
	}
	loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: `{"loaded":["srv0__tool_000","srv3__tool_003"]}`}}
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if specs, _ := d.Disclose(loads, actors.CatalogTools(cat)); len(specs) != 5 {
				b.Fatalf("%d specs", len(specs))
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		other := append(ts[:len(ts):len(ts)], tool("extra__tool", "mcp:extra", "One more"))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			c := ts
			if i%2 == 0 {
				c = other
			}
			d.Disclose(loads, c)
		}
	})
}
