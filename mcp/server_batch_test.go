package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A batch over Streamable HTTP (protocol 2025-03-26, the last with batches) that
// repeats an id is refused as an invalid request (-32600), as over stdio, and
// calls nothing: the SDK ran one of the two calls and dropped the other without
// a word.
func TestServerHTTPBatchRepeatingAnIDIsRefused(t *testing.T) {
	var calls atomic.Int32
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{countTool{&calls}}})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(session, body string) (*http.Response, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("MCP-Protocol-Version", "2025-03-26")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(raw)
	}
	resp, raw := send("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatalf("initialize: %s %q", resp.Status, raw)
	}
	send(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"count","arguments":{}}}`
	resp, raw = send(session, "["+call+","+call+"]")
	a := httpAnswer(t, []byte(raw))
	if a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "repeats the id 9") {
		t.Errorf("a batch repeating id 9: %s %q; want the invalid request -32600 saying the batch repeats the id 9", resp.Status, raw)
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("count was called %d times", got)
	}
	resp, raw = send(session, `[{"jsonrpc":"2.0","id":10,"method":"ping"},`+strings.Replace(call, `"id":9`, `"id":11`, 1)+"]")
	if resp.StatusCode != http.StatusOK || !strings.Contains(raw, `"id":10`) || !strings.Contains(raw, `"id":11`) {
		t.Errorf("a batch after it: %s %q", resp.Status, raw)
	}
}
