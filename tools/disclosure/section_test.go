package disclosure_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// The catalog strategy's prompt section lists every tool of every group by name,
// however many there are: an MCP server that joins (or sends tools/list_changed)
// with thousands of tools grows the stable prefix of every request past the
// window, after the node's start-time check (CheckPromptFits) passed without it.
// Its bounded form (BoundedSection, which requests take from decision rules 9)
// stays within MaxPromptSection, names every group with its number of tools, and
// says how many of each group's names it leaves out.
func TestCatalogSectionIsBounded(t *testing.T) {
	cat := &liveCatalog{}
	var ts []tools.Tool
	for s := range 5 {
		for i := range 800 {
			ts = append(ts, tool(fmt.Sprintf("server%d__operation_number_%04d", s, i), fmt.Sprintf("mcp:server%d", s), "Does one thing."))
		}
	}
	ts = append(ts, tool("tiny_one", "mcp:tiny", "Does one thing."))
	cat.set(ts...)
	d, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	whole := d.PromptSection()
	if len(whole) < 100<<10 {
		t.Fatalf("the whole section is %d bytes", len(whole))
	}
	b := d.BoundedSection(actors.CatalogTools(cat))
	if n := len(b); n > disclosure.MaxPromptSection || n < disclosure.MaxPromptSection*3/4 {
		t.Fatalf("the bounded section of 4,001 tools in 6 groups is %d bytes", n)
	}
	for s := range 5 {
		if !strings.Contains(b, fmt.Sprintf("- mcp:server%d (800 tools): server%d__operation_number_0000, ", s, s)) {
			t.Fatalf("group %d is not named with its first tools:\n%s", s, b)
		}
	}
	if !strings.Contains(b, "- mcp:tiny (1 tools): tiny_one\n") || strings.Count(b, " more\n") != 5 || !utf8.ValidString(b) {
		t.Fatalf("bounded section:\n%s", b)
	}
	if again := d.BoundedSection(actors.CatalogTools(cat)); again != b {
		t.Fatal("the same catalog gave another section")
	}
	// A small catalog's section is the same either way.
	small, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}, tool("a_b", "mcp:a", "x")})
	if err != nil {
		t.Fatal(err)
	}
	if small.BoundedSection(nil) != small.PromptSection() || small.PromptSection() == "" {
		t.Fatalf("small: %q vs %q", small.BoundedSection(nil), small.PromptSection())
	}
}

// Past what 16 KiB can name, groups are counted, not named.
func TestCatalogSectionOfManyGroupsIsBounded(t *testing.T) {
	cat := &liveCatalog{}
	var ts []tools.Tool
	for s := range 3000 {
		ts = append(ts, tool(fmt.Sprintf("s%04d_op", s), fmt.Sprintf("mcp:server_with_a_long_name_%04d", s), "Does one thing."))
	}
	cat.set(ts...)
	d, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	b := d.BoundedSection(actors.CatalogTools(cat))
	if len(b) > disclosure.MaxPromptSection || !strings.Contains(b, "- mcp:server_with_a_long_name_0000 (1 tools)\n") || !strings.Contains(b, "more groups, not shown)") {
		t.Fatalf("bounded section of %d bytes, ending %q", len(b), b[max(0, len(b)-200):])
	}
}
