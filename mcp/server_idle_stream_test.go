package mcp_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// A client's stream of notifications, cut and opened again from the last event
// it saw (Last-Event-ID, as the go-sdk's client reopens it), keeps the session no
// more than the stream it replaced did: a client that answers none of the
// server's pings on it loses the session once it idled for SessionTimeout, and
// the stream ends with it. Read as a call's stream resumed, which holds its
// session until the call answered, it held the session for as long as the
// connection stayed open, pings unanswered, with no bound.
func TestServerHTTPReopenedNotificationStreamDoesNotHoldTheSession(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := mcp.NewServer(&gateNode{}, mcp.ServerOptions{SessionTimeout: timeout})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := post(ctx, t, hs.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if id == "" {
		t.Fatalf("initialize answered %s with no session", resp.Status)
	}
	post(ctx, t, hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	// Until the server sees the cut stream gone, the SDK answers its reopening
	// 409 Conflict (the stream still has its writer): a client tries again, as
	// this one does.
	get := func(last string) *http.Response {
		var resp *http.Response
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", id)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
			if last != "" {
				req.Header.Set("Last-Event-ID", last)
			}
			if resp, err = freshConns.Do(req); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusConflict || ctx.Err() != nil {
				break
			}
			resp.Body.Close()
			time.Sleep(5 * time.Millisecond)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET (Last-Event-ID %q) answered %s", last, resp.Status)
		}
		return resp
	}
	// The stream of notifications, cut once its first event (a ping) came.
	stream := get("")
	var last string
	sc := bufio.NewScanner(stream.Body)
	for last == "" && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			last = v
		}
	}
	stream.Body.Close()
	if last == "" {
		t.Fatalf("the stream of notifications carried no event ID: %v", sc.Err())
	}
	// Opened again from there; its pings go unanswered.
	reopened := get(last)
	defer reopened.Body.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, reopened.Body)
	}()
	select {
	case <-ended:
	case <-time.After(20 * timeout):
		t.Fatalf("the session, idle with its pings unanswered, still holds its reopened stream after %s (session timeout %s)", 20*timeout, timeout)
	}
}
