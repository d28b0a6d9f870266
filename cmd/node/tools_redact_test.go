package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// node tools list and node tools call print what an MCP server says (its tools'
// descriptions and schemas, a call's result or error) through the redaction the
// events go through: a server configured with a key, which echoes it, does not put
// the key on the terminal.
func TestToolsListAndCallRedactAServersSecrets(t *testing.T) {
	clearLLMEnv(t)
	t.Chdir(t.TempDir())
	const key = "k3y-5ecr3t-7f1c9a0d4e"
	srv := sdk.NewServer(&sdk.Implementation{Name: "echoing", Version: "1"}, nil)
	type in struct {
		Fail bool `json:"fail,omitempty" jsonschema:"fail with an error (the key k3y-5ecr3t-7f1c9a0d4e is sent for you)"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "whoami", Description: "Says who you are; called with the key " + key + "."},
		func(_ context.Context, req *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
			got := req.Extra.Header.Get("X-Api-Key")
			if a.Fail {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "refused key " + got}}}, nil, nil
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are the holder of " + got}}}, nil, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"echoing": map[string]any{
		"url": hs.URL, "headers": map[string]string{"X-Api-Key": key}}}})
	path := writeConfig(t, string(cfg))

	for _, args := range [][]string{{"list", "--config", path}, {"list", "--json", "--config", path}} {
		code, out, errs := nodeTools(t, options{}, args...)
		if code != 0 || !strings.Contains(out, "echoing__whoami") {
			t.Fatalf("tools %v: exit %d\n%s%s", args, code, out, errs)
		}
		if strings.Contains(out+errs, key) || !strings.Contains(out, "[REDACTED]") {
			t.Errorf("tools %v shows the key or no redaction:\n%s%s", args, out, errs)
		}
		if args[1] == "--json" && !json.Valid([]byte(out)) {
			t.Errorf("tools list --json is not JSON:\n%s", out)
		}
	}
	code, out, errs := nodeTools(t, options{}, "call", "--config", path, "echoing__whoami", "{}")
	if code != 0 || !strings.Contains(out, "you are the holder of [REDACTED]") || strings.Contains(out+errs, key) {
		t.Errorf("tools call: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = nodeTools(t, options{}, "call", "--config", path, "echoing__whoami", `{"fail": true}`)
	if code != 1 || !strings.Contains(errs, "refused key [REDACTED]") || strings.Contains(out+errs, key) {
		t.Errorf("tools call failing: exit %d\n%s%s", code, out, errs)
	}
}
