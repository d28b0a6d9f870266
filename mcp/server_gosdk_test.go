package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A request the server refuses over Streamable HTTP before the SDK's handler
// answers it (too large for the server, or nesting deeper than the SDK decodes)
// fails that one call of the go-sdk's client, with its defaults, with the
// reason, and its session goes on. The go-sdk's client keeps its connection
// only when the refusal is a JSON-RPC error it can decode as the answer to a
// request, which needs the request's id: an error of id null failed the
// connection, and every later call of the client answered "client is closing".
func TestServerHTTPRefusalsLeaveTheGoSDKsSessionUp(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: newHoldModel(true), Tools: []tools.Tool{tools.Calculator{}}})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{MaxRequestBytes: 64 << 10}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	nested := func(depth int) json.RawMessage {
		return json.RawMessage(`{"input":"x","extra":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	}
	for _, c := range []struct {
		label string
		args  any
		says  string
	}{
		{"an input larger than the server takes", map[string]any{"input": strings.Repeat("x", 100<<10)}, "the request is larger than 65536 bytes"},
		{"arguments nested 2000 deep", nested(2000), "nesting depth"},
		{"arguments nested 9000 deep", nested(9000), "nesting depth"},
	} {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: c.args})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, c.says) {
			t.Errorf("%s: %v, want a JSON-RPC error saying %q", c.label, err, c.says)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "still up"}})
		if err != nil || res.IsError || textOf(res) != "held: still up" {
			t.Fatalf("run_task after %s: %v %v, want the session up", c.label, err, res)
		}
	}

	// A body without a Content-Length, cut at the bound, is answered with the id
	// its head holds.
	body := `{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"run_task","arguments":{"input":"` + strings.Repeat("x", 100<<10) + `"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("MCP-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var a rpcAnswer
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(raw, &a) != nil || string(a.ID) != `"big-1"` || a.Error == nil || a.Error.Code != -32600 {
		t.Errorf("a chunked body past the bound: %s %q, want 413 with a JSON-RPC error of id \"big-1\"", resp.Status, raw)
	}
}
