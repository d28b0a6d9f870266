package mcp

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// openSessions starts n sessions in h (an initialize and the initialized
// notification each, served in process) and returns their IDs.
func openSessions(tb testing.TB, h http.Handler, n int) []string {
	tb.Helper()
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"many","version":"1"}}}`
	ids := make([]string, n)
	for i := range ids {
		w := serveIn(h, "", init)
		ids[i] = w.Header().Get("Mcp-Session-Id")
		if w.Code != http.StatusOK || ids[i] == "" {
			tb.Fatalf("initialize %d: %d %s", i, w.Code, w.Body)
		}
		if w := serveIn(h, ids[i], `{"jsonrpc":"2.0","method":"notifications/initialized"}`); w.Code != http.StatusAccepted {
			tb.Fatalf("initialized %d: %d %s", i, w.Code, w.Body)
		}
	}
	return ids
}

// serveIn posts body in session id (none: "") to h, in process.
func serveIn(h http.Handler, id, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		r.Header.Set("Mcp-Session-Id", id)
		r.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A request in a session, and a session started, read the SDK's whole list
// of sessions (a copy of it, under the lock every request takes): with 10,000
// sessions a tools/list took 8 times its own time, and the clients' requests
// were served one at a time. The server asks its own index instead: the
// sessions read off the SDK's list do not grow with the requests.
func TestServerHTTPRequestDoesNotListTheSessions(t *testing.T) {
	const sessions, requests = 200, 20
	nd := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	s := NewServer(nd, ServerOptions{MaxSessions: 2 * sessions})
	s.listed = &atomic.Int64{}
	h := s.Handler()
	ids := openSessions(t, h, sessions)
	opened := s.listed.Load()
	for i := range requests {
		if w := serveIn(h, ids[i], listTools); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"result"`) {
			t.Fatalf("tools/list: %d %s", w.Code, w.Body)
		}
	}
	more := openSessions(t, h, 1)
	if w := serveIn(h, more[0], listTools); w.Code != http.StatusOK {
		t.Fatalf("tools/list: %d %s", w.Code, w.Body)
	}
	if opened >= sessions {
		t.Errorf("opening %d sessions read %d sessions off the SDK's list", sessions, opened)
	}
	if got := s.listed.Load() - opened; got >= sessions {
		t.Errorf("%d requests among %d sessions read %d sessions off the SDK's list", requests+3, sessions, got)
	}
}

// BenchmarkServerHTTPRequestAmongSessions measures a tools/list in one session
// while the server holds many others: its cost should not grow with them
// (compare sessions=10 and sessions=10000 with benchstat).
func BenchmarkServerHTTPRequestAmongSessions(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run("sessions="+strconv.Itoa(n), func(b *testing.B) {
			nd := nodetest.Start(b, node.Config{Model: llm.Offline{}})
			s := NewServer(nd, ServerOptions{MaxSessions: n + 10})
			h := s.Handler()
			ids := openSessions(b, h, n)
			b.ResetTimer()
			for b.Loop() {
				if w := serveIn(h, ids[0], listTools); w.Code != http.StatusOK {
					b.Fatalf("tools/list: %d %s", w.Code, w.Body)
				}
			}
		})
	}
}
