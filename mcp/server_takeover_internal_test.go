package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// writersKept counts the requests the server notes as writing a stream.
func (s *Server) writersKept() int {
	n := 0
	s.writers.Range(func(any, any) bool { n++; return true })
	return n
}

// The note of which request writes each stream lasts while the request does: a
// request in a session the server resumes (a restart, another node's session, an
// ID a client made up) opened the resumed session's streams (its stream of
// notifications, its initialize's) under its own name, and only the last of them
// was forgotten when it ended, so that every session resumed grew the server's
// memory for good.
func TestServerHTTPStreamWritersForgottenWithTheirRequests(t *testing.T) {
	s := NewServer(&echoNode{}, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(id, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("answered %s", resp.Status)
		}
	}
	id := rand.Text()
	for i := range 1000 {
		send(id, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+1)+`,"method":"tools/list"}`)
	}
	for range 30 {
		send(rand.Text(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	}
	if n := s.writersKept(); n != 0 {
		t.Fatalf("%d streams still noted as written once every request ended", n)
	}
}
