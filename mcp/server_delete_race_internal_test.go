package mcp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A request in a session the server does not hold found it not ended, and a
// DELETE of it came before the request resumed it: the DELETE recorded the end
// and answered, and the request brought the deleted session back live on the
// node. The check and the resumption, and the DELETE's record, run one at a time
// for an ID now: the DELETE waits, then ends the session the request resumed.
func TestServerHTTPDeleteDuringAResumptionEndsTheSession(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := NewServer(n, ServerOptions{})
	hs1 := httptest.NewServer(first.Handler())
	defer hs1.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs1.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	id := cs.ID()

	// A second server of the node, which never held the session, as another
	// node of a cluster or this one after a restart.
	s := NewServer(n, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	do := func(method, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, hs.URL, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const ping = `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	deleted := make(chan int, 1)
	s.afterEndedCheck = func(r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		s.afterEndedCheck = nil
		go func() { deleted <- do(http.MethodDelete, "") }()
		// The DELETE records the end and answers before the request resumes
		// the session, unless it waits for the request's resumption.
		select {
		case <-deleted:
			deleted <- 0
		case <-time.After(2 * time.Second):
		}
	}
	if code := do(http.MethodPost, ping); code != http.StatusOK {
		t.Fatalf("the ping that resumed the session answered %d", code)
	}
	<-deleted
	if code := do(http.MethodPost, ping); code != http.StatusNotFound {
		t.Errorf("a ping after the DELETE answered %d, want 404: the deleted session is live again", code)
	}
}
