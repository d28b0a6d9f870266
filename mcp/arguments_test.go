package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// A server's tool reads the model's arguments for its schema as a built-in does:
// key=value pairs (what the text protocol and "node tools call a=1" send) and
// numbers written as strings reach the server as the schema's types, and a key
// written twice, a wrong type or a missing field come back as an argument error
// naming the field, without a call to the server. A tool whose schema the parser
// refuses is not offered, and why is logged and in the server's status: it was
// offered, and any one JSON object went to the server unchecked.
func TestServerToolArgumentsAreReadForItsSchema(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "sum", Version: "1"}, nil)
	var mu sync.Mutex
	var got []string
	handler := func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		mu.Lock()
		got = append(got, string(req.Params.Arguments))
		mu.Unlock()
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(req.Params.Arguments)}}}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "add", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"}},"required":["a"]}`)}, handler)
	srv.AddTool(&sdk.Tool{Name: "odd", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"a":{"type":"int"}}}`)}, handler)
	// Refs that go round: the validator would overflow the stack, ending the process.
	srv.AddTool(&sdk.Tool{Name: "loop", InputSchema: json.RawMessage(
		`{"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A"}},"properties":{"a":{"$ref":"#/$defs/A"}},"type":"object"}`)}, handler)
	// The same through an anchor, which the validator follows as well.
	srv.AddTool(&sdk.Tool{Name: "anchorloop", InputSchema: json.RawMessage(
		`{"$defs":{"A":{"$anchor":"a","allOf":[{"$ref":"#a"}]}},"properties":{"a":{"$ref":"#/$defs/A"}},"type":"object"}`)}, handler)
	logs := &records{}
	c, err := mcp.NewClient(mcp.ClientConfig{Logger: slog.New(logs), Servers: map[string]mcp.ServerConfig{"s": {Transport: mcp.InProcess(srv)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { c.Close(); <-done }()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	add, ok := c.Tool("s__add")
	if !ok {
		t.Fatalf("catalog = %v", c.Specs())
	}
	for args, want := range map[string]string{
		`a=3, b=2.5`:             `{"a":3,"b":2.5}`,
		`{"a":"3","b":"0.5"}`:    `{"a":3,"b":0.5}`,
		`{"a":9007199254740993}`: `{"a":9007199254740993}`,
	} {
		if out, err := add.Call(ctx, tools.Call{Key: "s/1", Arguments: args}); err != nil || out != want {
			t.Errorf("add %s = %q, %v; want %s", args, out, err, want)
		}
	}
	mu.Lock()
	calls := len(got)
	mu.Unlock()
	for args, want := range map[string]string{
		`{"a":1,"a":2}`: `the key "a" appears twice`,
		`{"a":"x"}`:     `"a" must be an integer, not the string "x"`,
		`{"b":1}`:       `missing the required field "a"`,
		`{"a":1e400}`:   `"a" is a number too large to represent`,
	} {
		_, err := add.Call(ctx, tools.Call{Key: "s/2", Arguments: args})
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), want) {
			t.Errorf("add %s: %v; want an argument error saying %s", args, err, want)
		}
	}
	mu.Lock()
	if len(got) != calls {
		t.Errorf("refused arguments reached the server: %q", got[calls:])
	}
	mu.Unlock()
	for _, name := range []string{"odd", "loop", "anchorloop"} {
		if _, ok := c.Tool("s__" + name); ok {
			t.Errorf("%s is offered; want it left out for its schema", name)
		}
	}
	var skipped []string
	for _, st := range c.Status() {
		skipped = append(skipped, st.Skipped...)
	}
	for name, says := range map[string]string{"odd": `"int"`, "loop": "leads back to itself", "anchorloop": "leads back to itself"} {
		want := `tool "` + name + `": its input schema is not one the node can check arguments against: `
		if !slices.ContainsFunc(skipped, func(why string) bool { return strings.HasPrefix(why, want) && strings.Contains(why, says) }) {
			t.Errorf("skipped = %q; want %s… saying %s", skipped, want, says)
		}
	}
	if n, _ := logs.count(slog.LevelWarn, "tool left out"); n != 3 {
		t.Errorf("%d warnings of a tool left out, want 3", n)
	}
}
