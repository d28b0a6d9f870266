package mcp

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A session resumed by a GET of its stream of notifications (the first request
// of a client after the node restarted is often its stream, opened again) idles
// out once its client hung up, as a session resumed by any other request does.
// The stream does not hold its session, so that nothing started the session's
// idle timer: the session stayed for good, closed only by the cap once the
// server held more than MaxSessions.
func TestServerHTTPSessionResumedByAStreamIdlesOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	s := NewServer(&echoNode{}, ServerOptions{SessionTimeout: timeout})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rand.Text() // a session of another process's, or of this one before a restart
	streamCtx, hangUp := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(streamCtx, http.MethodGet, hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !s.known(id) {
		t.Fatalf("the stream answered %s, session known %v; want it resumed", resp.Status, s.known(id))
	}
	hangUp()
	resp.Body.Close()
	deadline := time.Now().Add(40 * timeout)
	for s.known(id) {
		if time.Now().After(deadline) {
			t.Fatalf("the session resumed by its stream is still held %s after its client hung up (session timeout %s)", 40*timeout, timeout)
		}
		time.Sleep(timeout / 4)
	}
}
