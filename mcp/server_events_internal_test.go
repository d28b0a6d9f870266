package mcp

import (
	"context"
	"errors"
	"fmt"
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

// A client that stays connected and keeps calling (its session never times out)
// grew the node's memory with every request: the SDK's event store kept an entry
// for each stream a POST opened until the session closed. The server keeps the
// events of maxStreamsPerSession streams a session, the latest.
func TestServerHTTPSessionKeepsABoundedNumberOfStreams(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	s := NewServer(n, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 2025-11-25, as the Python and TypeScript SDKs speak it: the SDK keeps the
	// events of each of its streams (a priming event, then the answer).
	const version = "2025-11-25"
	post := func(session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"long","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var last string
	for i := 1; i <= 3*maxStreamsPerSession; i++ {
		resp, body := post(session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"calculator","arguments":{"expression":"%d+1"}}}`, i, i))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, fmt.Sprint(i+1)) {
			t.Fatalf("call %d: %s %s", i, resp.Status, body)
		}
		last = body
	}
	if got := s.events.streams(session); got > maxStreamsPerSession {
		t.Fatalf("after %d calls in one session the server keeps the events of %d streams, more than %d", 3*maxStreamsPerSession, got, maxStreamsPerSession)
	}
	// The latest call's stream can still be resumed from its first event.
	id := ""
	for _, line := range strings.Split(last, "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id = v
			break
		}
	}
	streamID, idx, ok := parseEventID(id)
	if !ok {
		t.Fatalf("the last call's answer has no event ID: %q", last)
	}
	if !s.events.has(ctx, session, streamID, idx-1) {
		t.Error("the latest stream's events are gone")
	}
}

// The store keeps the SDK's MemoryEventStore's byte bound: past it, the oldest
// data goes, and a read from before it says the events were purged.
func TestEventStorePurgesPastItsBytes(t *testing.T) {
	s := newEventStore()
	s.maxBytes = 10
	ctx := context.Background()
	for i := range 4 {
		if err := s.Append(ctx, "a", "x", []byte(fmt.Sprintf("%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if s.bytes > s.maxBytes {
		t.Fatalf("%d bytes kept, bound %d", s.bytes, s.maxBytes)
	}
	for _, err := range s.After(ctx, "a", "x", -1) {
		if !errors.Is(err, sdk.ErrEventsPurged) {
			t.Fatalf("read from the start: %v, want ErrEventsPurged", err)
		}
	}
	var got []string
	for d, err := range s.After(ctx, "a", "x", 1) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d))
	}
	if strings.Join(got, ",") != "0002,0003" {
		t.Fatalf("after index 1: %v", got)
	}
	if err := s.SessionClosed(ctx, "a"); err != nil || s.bytes != 0 || s.streams("a") != 0 {
		t.Fatalf("closed: %v, %d bytes, %d streams", err, s.bytes, s.streams("a"))
	}
}
