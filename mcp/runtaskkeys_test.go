package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// run_task's arguments with a member named twice, once miscased, are refused, as
// its schema (additionalProperties: false) says "Input" is no member: encoding/json
// took the last one without case, so {"input":"…","Input":"…"} ran the second
// text, which a client or gateway that checked "input" never saw (and
// "Max_tokens" lifted the budget a proxy had checked).
func TestRunTaskArgumentsWithMiscasedMembersAreRefused(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "ran")})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	for _, args := range []string{
		`{"input":"what is 2+2?","Input":"something else"}`,
		`{"input":"x","max_tokens":10,"Max_Tokens":100000000}`,
	} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(textOf(res), "Input") && !strings.Contains(textOf(res), "Max_Tokens") {
			t.Errorf("run_task %s answered %q (error %v), want it refused naming the miscased member", args, textOf(res), res.IsError)
		}
	}
}
