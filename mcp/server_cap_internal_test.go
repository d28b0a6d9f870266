package mcp

import (
	"context"
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

// liveSessions counts the server's sessions over Streamable HTTP.
func (s *Server) liveSessions() int {
	n := 0
	for ss := range s.srv.Sessions() {
		if ss.ID() != "" {
			n++
		}
	}
	return n
}

// A client that opens sessions in a loop (initialize, never DELETE) grew the
// server's sessions without bound for a whole session timeout. The server holds
// MaxSessions at most: a new one closes the session idle the longest, whose
// client (here the official SDK's) goes on in it, resumed, at its next request.
func TestServerHTTPSessionsAreCapped(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	const max = 3
	s := NewServer(n, ServerOptions{MaxSessions: max})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i := range 30 {
		initializeOver(ctx, t, hs.URL)
		// The SDK forgets a closed session a moment after.
		deadline := time.Now().Add(10 * time.Second)
		for got := s.liveSessions(); got > max; got = s.liveSessions() {
			if time.Now().After(deadline) {
				t.Fatalf("after %d sessions opened, the server holds %d, more than %d", i+2, got, max)
			}
			time.Sleep(time.Millisecond)
		}
	}
	s.use.mu.Lock()
	marked := len(s.use.last)
	s.use.mu.Unlock()
	if marked > max+1 {
		t.Errorf("the server marks %d sessions' use", marked)
	}
	// The SDK's client's session was closed long ago: it goes on, resumed.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("the first client's session: %v", err)
	}
}

// A session the SDK lists before the request that starts it is answered (an
// initialize under way) has no request marked yet. It was taken for the session
// idle the longest and closed by another request's cap while the SDK was still
// connecting it: a data race inside the SDK, and a new client's session closed
// as it began. Such a session is left to the request starting it.
func TestServerHTTPCapLeavesASessionBeingStarted(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	const max = 2
	s := NewServer(n, ServerOptions{MaxSessions: max})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	// The session being started: made by the SDK's own handler on s's server, so
	// that nothing of s marks a request in it, as while its initialize runs.
	starting := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, nil))
	defer starting.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unmarked := initializeOver(ctx, t, starting.URL)
	for range max + 2 {
		initializeOver(ctx, t, hs.URL)
	}
	if !s.known(unmarked) {
		t.Fatal("the cap closed a session whose start was under way")
	}
	s.use.mu.Lock()
	closed := s.use.closed[unmarked]
	s.use.mu.Unlock()
	if closed {
		t.Fatal("the cap closed a session whose start was under way")
	}
}

// initializeOver starts a session at url with a bare initialize, as a client in a
// loop does, and returns its ID.
func initializeOver(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"loop","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %s", resp.Status)
	}
	return id
}
