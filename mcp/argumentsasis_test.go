package mcp_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/tools"
)

// A server's tool gets the model's arguments checked and coerced only: no
// default of its schema is filled in, a null stays, and an integer keeps its
// digits as written, through anyOf too.
func TestServerToolArgumentsAreNotFilledIn(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "issues", Version: "1"}, nil)
	var mu sync.Mutex
	var got []string
	handler := func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		mu.Lock()
		got = append(got, string(req.Params.Arguments))
		mu.Unlock()
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "update", InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"id":{"type":"integer"},"title":{"type":"string"},"state":{"type":"string","default":"open"},` +
		`"milestone":{"type":"integer"},"ref":{"anyOf":[{"type":"string"},{"type":"integer"}]},"n":{"type":"number"}},"required":["id"]}`)}, handler)
	c, ctx := runServer(t, srv)
	update, ok := c.Tool("s__update")
	if !ok {
		t.Fatalf("catalog = %v", c.Specs())
	}
	for _, args := range []string{
		`{"id":1,"title":"x","milestone":null}`,
		`{"id":"2","ref":10000000000000000001,"n":1.50}`,
		`id=3, title=12345`,
	} {
		if _, err := update.Call(ctx, tools.Call{Key: "s/1", Arguments: args}); err != nil {
			t.Errorf("update %s: %v", args, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		`{"id":1,"milestone":null,"title":"x"}`,
		`{"id":2,"n":1.50,"ref":10000000000000000001}`,
		`{"id":3,"title":"12345"}`,
	}
	if len(got) != len(want) {
		t.Fatalf("the server got %q, want %q", got, want)
	}
	for i := range want {
		var g, w any
		if json.Unmarshal([]byte(got[i]), &g) != nil || json.Unmarshal([]byte(want[i]), &w) != nil {
			t.Fatalf("the server got %q", got[i])
		}
		if gb, _ := json.Marshal(g); string(gb) != string(mustJSON(w)) || !sameDigits(got[i], want[i]) {
			t.Errorf("call %d: the server got %s, want %s", i, got[i], want[i])
		}
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// sameDigits compares two JSON objects by their keys and values' texts.
func sameDigits(a, b string) bool {
	var x, y map[string]json.RawMessage
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil || len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if string(y[k]) != string(v) {
			return false
		}
	}
	return true
}
