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

// Past its bound the store drops the oldest data of all, not the first datum of
// every stream: a stream just opened keeps its events (the one a client is most
// likely to resume). Before, each purge took one datum from every stream of every
// session, walking them all at each Append.
func TestEventStorePurgesTheOldestDataOfAllStreams(t *testing.T) {
	s := newEventStore()
	s.maxBytes = 12
	ctx := context.Background()
	for _, a := range []struct{ session, stream, data string }{
		{"a", "x", "x000"}, {"a", "x", "x001"}, {"b", "y", "y000"}, {"a", "z", "z000"},
	} {
		if err := s.Append(ctx, a.session, a.stream, []byte(a.data)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(session, stream string, after int) string {
		var got []string
		for d, err := range s.After(ctx, session, stream, after) {
			if err != nil {
				return err.Error()
			}
			got = append(got, string(d))
		}
		return strings.Join(got, ",")
	}
	if got := read("a", "x", 0); got != "x001" {
		t.Errorf("stream x after 0: %q; want x001 (x000, the oldest, purged)", got)
	}
	if got := read("b", "y", -1); got != "y000" {
		t.Errorf("stream y from its start: %q; want y000, kept", got)
	}
	if got := read("a", "z", -1); got != "z000" {
		t.Errorf("stream z from its start: %q; want z000", got)
	}
	// Data of closed sessions and forgotten streams is not counted, and purges
	// skip it: the bound holds over many sessions opening and closing.
	for i := range 5000 {
		session := fmt.Sprintf("s%d", i%50)
		if err := s.Append(ctx, session, fmt.Sprint(i%7), []byte("0123")); err != nil {
			t.Fatal(err)
		}
		if i%13 == 0 {
			if err := s.SessionClosed(ctx, session); err != nil {
				t.Fatal(err)
			}
		}
		if s.bytes > s.maxBytes || s.bytes < 0 || s.kept < 0 {
			t.Fatalf("after %d appends: %d bytes kept (bound %d), %d data", i+1, s.bytes, s.maxBytes, s.kept)
		}
	}
	if len(s.fifo)-s.head > 2*max(s.kept, 1024) {
		t.Errorf("the purge queue holds %d entries for %d data kept", len(s.fifo)-s.head, s.kept)
	}
}

// BenchmarkEventStoreAppendFull appends to a store past its byte bound, with
// 1,000 sessions of 256 streams each holding data: each Append purges.
func BenchmarkEventStoreAppendFull(b *testing.B) {
	s := newEventStore()
	ctx := context.Background()
	data := make([]byte, 40)
	s.maxBytes = 1000 * maxStreamsPerSession * len(data)
	for i := range 1000 {
		for j := range maxStreamsPerSession {
			_ = s.Append(ctx, fmt.Sprint("s", i), fmt.Sprint(j), data)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		_ = s.Append(ctx, fmt.Sprint("s", i%1000), fmt.Sprint(i%maxStreamsPerSession), data)
	}
}
