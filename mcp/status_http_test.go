package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// A tool an MCP server offers whose schema the node refuses is left out of the
// catalog: an operator of a node served over HTTP saw why only in its log. The
// status handler says it, with each server's state and tools.
func TestStatusHandlerSaysTheToolsLeftOut(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "up", Version: "1"}, nil)
	handler := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "fine", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
	srv.AddTool(&sdk.Tool{Name: "odd", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"int"}}}`)}, handler)
	c := startClient(t, map[string]mcp.ServerConfig{"up": {Transport: mcp.InProcess(srv)}}, nil)

	w := httptest.NewRecorder()
	c.StatusHandler(func(s string) string { return strings.ReplaceAll(s, "odd", "[REDACTED]") }).
		ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/mcp/servers", nil))
	var got mcp.ServersStatus
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || err != nil {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	if len(got.Servers) != 1 || got.Servers[0].Name != "up" || got.Servers[0].State != mcp.StateConnected ||
		!slices.Equal(got.Servers[0].Tools, []string{"up__fine"}) {
		t.Fatalf("servers %+v", got.Servers)
	}
	if sk := got.Servers[0].Skipped; len(sk) != 1 || !strings.Contains(sk[0], `tool "[REDACTED]": its input schema is not one the node can check arguments against`) {
		t.Errorf("skipped %q, want the odd tool (redacted) and why", sk)
	}
	if st := c.Status()[0].Skipped; !strings.Contains(st[0], `"odd"`) {
		t.Errorf("the handler's redaction changed the client's status: %q", st)
	}

	// A node with no MCP servers answers none.
	w = httptest.NewRecorder()
	(*mcp.Client)(nil).StatusHandler(nil).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/mcp/servers", nil))
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"servers":[]}` {
		t.Errorf("no client: %d %s", w.Code, w.Body)
	}
}
