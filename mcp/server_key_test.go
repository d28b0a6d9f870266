package mcp_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// An idempotency key in a tool call's _meta names that call: the same call sent
// again with it is answered from memory, but another tool or other arguments
// under the same key is another call. Before, the key alone chose the answer: a
// client that reused a key got the calculator's 6 for 5*5, and for the clock. A
// key is any string of the client's (before, "k-1" was refused with an error
// about effect keys having no '/'); one that is not a string is refused, rather
// than run without a key.
func TestServerIdempotencyKeyNamesOneCall(t *testing.T) {
	var calls atomic.Int32
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{tools.Calculator{}, tools.NewClock(nil), countTool{&calls}}})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	ctx := context.Background()
	call := func(key any, name string, args map[string]any) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args, Meta: sdk.Meta{mcp.IdempotencyKeyMeta: key}})
		if err != nil {
			t.Fatalf("%s with key %v: %v", name, key, err)
		}
		return res
	}
	for _, key := range []string{"k-1", "caller-session/7"} {
		if res := call(key, "calculator", map[string]any{"expression": "2*3"}); res.IsError || textOf(res) != "6" {
			t.Errorf("calculator 2*3 with key %q: %q", key, textOf(res))
		}
		if res := call(key, "calculator", map[string]any{"expression": "5*5"}); res.IsError || textOf(res) != "25" {
			t.Errorf("calculator 5*5 with the key of 2*3, %q: %q, want 25", key, textOf(res))
		}
		if res := call(key, "clock", map[string]any{}); res.IsError || textOf(res) == "6" || textOf(res) == "25" {
			t.Errorf("clock with the key of a calculator call, %q: %q", key, textOf(res))
		}
		before := calls.Load()
		for range 2 {
			call(key, "count", map[string]any{"n": 1})
		}
		if got := calls.Load() - before; got != 1 {
			t.Errorf("count called %d times under key %q, want once", got, key)
		}
	}
	for _, key := range []any{5, "", nil, strings.Repeat("k", 600)} {
		before := calls.Load()
		if res := call(key, "count", map[string]any{}); !res.IsError || !strings.Contains(textOf(res), "key") {
			t.Errorf("count with key %.20s: %q, want an error about the key", fmt.Sprint(key), textOf(res))
		}
		if calls.Load() != before {
			t.Errorf("count was called with the bad key %.20s", fmt.Sprint(key))
		}
	}
}
