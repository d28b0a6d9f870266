package disclosure_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// BenchmarkDisclose is the cost Disclose adds to each model request of a session that
// searched once, with 175 catalog tools over 7 servers: over an unchanged catalog
// (the view is reused), the same with the catalog of an mcp.Client connected to 7
// go-sdk servers in the process, and over a catalog that changed since the last
// request (the groups, the index and the section are made again).
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
	b.Run("unchanged-mcp", func(b *testing.B) {
		servers := map[string]mcp.ServerConfig{}
		for s := range 7 {
			srv := sdk.NewServer(&sdk.Implementation{Name: fmt.Sprintf("srv%d", s), Version: "1"}, nil)
			for i := range 25 {
				srv.AddTool(&sdk.Tool{Name: fmt.Sprintf("tool_%03d", s*25+i), Description: fmt.Sprintf("Does thing number %d with care", i),
					InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					return &sdk.CallToolResult{}, nil
				})
			}
			servers[fmt.Sprintf("srv%d", s)] = mcp.ServerConfig{Transport: mcp.InProcess(srv)}
		}
		client, err := mcp.NewClient(mcp.ClientConfig{Servers: servers})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- client.Run(ctx) }()
		defer func() { client.Close(); <-done }()
		if err := client.WaitReady(ctx); err != nil || len(client.Specs()) != 175 {
			b.Fatalf("%d tools, %v", len(client.Specs()), err)
		}
		d, err := disclosure.New(disclosure.Search, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(client))
		if err != nil {
			b.Fatal(err)
		}
		loads := []actors.ToolLoad{{Tool: actors.ToolSearchTools, Result: `{"loaded":["srv0__tool_000","srv3__tool_075"]}`}}
		b.ReportAllocs()
		for b.Loop() {
			if specs, _ := d.Disclose(loads, actors.CatalogTools(client)); len(specs) != 5 {
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

// BenchmarkDiscloseLongSession is Disclose over the loads of a session that searched
// n times (each search loading two of 175 catalog tools): the cost each model request
// of a long session pays for what it loaded over its life. reparse reads every load
// (Disclose, as each request did before a session folded its loads); folded reads
// the session's loads as it folded them (DiscloseFolded, as each request does).
//
//	go test ./tools/disclosure -run '^$' -bench BenchmarkDiscloseLongSession -benchmem
func BenchmarkDiscloseLongSession(b *testing.B) {
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
	for _, n := range []int{1, 100, 1000, 5000} {
		var loads []actors.ToolLoad
		for k := range n {
			loads = append(loads, actors.ToolLoad{Tool: actors.ToolSearchTools,
				Result: fmt.Sprintf(`{"loaded":["srv%d__tool_%03d","srv%d__tool_%03d"]}`, k%7, k%175, (k+3)%7, (k+3)%175)})
		}
		b.Run(fmt.Sprintf("reparse/loads=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.Disclose(loads, actors.CatalogTools(cat))
			}
		})
		folded := actors.FoldToolLoads(loads)
		b.Run(fmt.Sprintf("folded/loads=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.DiscloseFolded(folded, actors.CatalogTools(cat))
			}
		})
	}
}
