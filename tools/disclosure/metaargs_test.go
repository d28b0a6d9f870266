package disclosure_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// load_tools and search_tools read their arguments as every tool's are read: a
// wrong type or a key written twice is an error naming the field (not the
// decoder's words about Go struct fields, nor the last of two keys taken), a
// number written as a string is taken ("3" for the integer limit), and an unknown
// group's name is quoted clipped, not echoed whole into the model's context.
func TestDisclosureToolsReadArgumentsAsEveryToolDoes(t *testing.T) {
	type none struct{}
	echo := tools.MustFunc("echo", "Echoes a message back.", func(_ context.Context, _ none) (string, error) { return "", nil },
		tools.WithSource("mcp:ev"))
	byName := func(d *disclosure.Disclosure, name string) tools.Tool {
		for _, tl := range d.Tools() {
			if tl.Spec().Name == name {
				return tl
			}
		}
		t.Fatalf("no tool %s", name)
		return nil
	}
	search, err := disclosure.New(disclosure.Search, []tools.Tool{echo})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := disclosure.New(disclosure.Catalog, []tools.Tool{echo})
	if err != nil {
		t.Fatal(err)
	}
	st, lt := byName(search, "search_tools"), byName(catalog, "load_tools")
	ctx := context.Background()
	for _, c := range []struct {
		tool      tools.Tool
		args      string
		want, not string
	}{
		{st, `{"query":{"a":1}}`, `"query" must be a string`, "Go struct"},
		{st, `{"query":"echo","limit":true}`, `"limit" must be an integer`, "Go struct"},
		{st, `{"query":"nothing","query":"echo"}`, `the key "query" appears twice`, ""},
		{lt, `{"group":["mcp:ev"]}`, `"group" must be a string`, "Go struct"},
		{lt, `{"group":"nope","group":"mcp:ev"}`, `the key "group" appears twice`, ""},
		// An unknown group of 10,000 bytes is named cut, not quoted back whole.
		{lt, `{"group":"` + strings.Repeat("x", 10000) + `"}`, `no group is named "xxx`, strings.Repeat("x", 1000)},
	} {
		out, err := c.tool.Call(ctx, tools.Call{Key: "s/1", Arguments: c.args})
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) || c.not != "" && strings.Contains(err.Error(), c.not) {
			t.Errorf("%s(%.80s): %q, %v; want an error saying %s", c.tool.Spec().Name, c.args, out, err, c.want)
		}
	}
	if out, err := st.Call(ctx, tools.Call{Key: "s/2", Arguments: `{"query":"echo","limit":"3"}`}); err != nil || !strings.Contains(out, `"loaded":["echo"]`) {
		t.Errorf(`search_tools with "limit":"3": %q, %v; want the limit taken as 3`, out, err)
	}
}

// search_tools quotes a long query back cut, so that its result stays small: the
// result is cut at the tool's output bound (64 KiB) before it is recorded, and a
// query echoed whole past it cut off the tools loaded, which the model then never
// read and the session never folded (the result no longer parsed).
func TestSearchToolsResultQuotesALongQueryCut(t *testing.T) {
	type none struct{}
	echo := tools.MustFunc("echo", "Echoes a message back.", func(_ context.Context, _ none) (string, error) { return "", nil },
		tools.WithSource("mcp:ev"))
	d, err := disclosure.New(disclosure.Search, []tools.Tool{echo})
	if err != nil {
		t.Fatal(err)
	}
	var st tools.Tool
	for _, tl := range d.Tools() {
		if tl.Spec().Name == "search_tools" {
			st = tl
		}
	}
	query := strings.Repeat("echo a message back ", 5000) // 100 KB
	out, err := st.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"query":"` + query + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Query  string   `json:"query"`
		Loaded []string `json:"loaded"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(out) > 2048 || !slices.Contains(r.Loaded, "echo") || !strings.HasSuffix(r.Query, "…") {
		t.Fatalf("search_tools for a 100 KB query answered %d bytes (%v): %.300s", len(out), err, out)
	}
}

// load_tools' result names every tool of the group whole, under the output bound
// the node cuts results at before it records them: a group of 1000 tools (an MCP
// server's most) with long names passed the default 64 KiB, and a result cut there
// no longer parsed, so the session loaded none of the group.
func TestLoadToolsResultOfALargeGroupIsNotCut(t *testing.T) {
	type none struct{}
	var ts []tools.Tool
	for i := range 1000 {
		name := fmt.Sprintf("big__%s_%04d", strings.Repeat("t", 54), i)
		ts = append(ts, tools.MustFunc(name, "A tool.", func(_ context.Context, _ none) (string, error) { return "", nil }, tools.WithSource("mcp:big")))
	}
	d, err := disclosure.New(disclosure.Catalog, ts)
	if err != nil {
		t.Fatal(err)
	}
	var lt tools.Tool
	for _, tl := range d.Tools() {
		if tl.Spec().Name == "load_tools" {
			lt = tl
		}
	}
	out, err := tools.CallLimited(context.Background(), lt, "load_tools", tools.Call{Key: "s/1", Arguments: `{"group":"mcp:big"}`})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Loaded []string `json:"loaded"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Loaded) != 1000 {
		t.Fatalf("load_tools of 1000 tools answered %d bytes, %d tools (%v): …%s", len(out), len(r.Loaded), err, out[max(0, len(out)-120):])
	}
}
