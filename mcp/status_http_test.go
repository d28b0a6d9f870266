package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

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

// A server's error names its URL as Go's HTTP client writes it: the password
// masked, the query whole. The node's redactor replaces only the secrets it was
// given of at least redact.MinSecretLen bytes, so a short ?api_key= value was
// served whole by GET /v1/mcp/servers (and said in the log, and in the error of
// a call of the server's tools). The client hides the credentials of the URLs
// in a server's error, whatever their length.
func TestStatusHidesTheURLCredentialsOfAServersError(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{
		"dead": {URL: "http://alice:pw12@127.0.0.1:1/mcp?api_key=tok123&page=2"},
	}, func(cfg *mcp.ClientConfig) { cfg.ConnectTimeout = 5 * time.Second })
	w := httptest.NewRecorder()
	c.StatusHandler(nil).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/mcp/servers", nil))
	var got mcp.ServersStatus
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Servers) != 1 {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	st := got.Servers[0]
	if st.State != mcp.StateDown || !strings.Contains(st.Error, "127.0.0.1:1/mcp?api_key=[REDACTED]&page=2") {
		t.Errorf("state %q error %q, want down with the URL, its api_key hidden", st.State, st.Error)
	}
	if strings.Contains(w.Body.String(), "tok123") || strings.Contains(w.Body.String(), "pw12") {
		t.Errorf("a credential of the server's URL served: %s", w.Body)
	}
}
