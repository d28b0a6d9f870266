package a2a

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// silentBackend is a Backend whose tasks are submitted and then say nothing.
type silentBackend struct {
	mu  sync.Mutex
	log []messages.Envelope
}

func (b *silentBackend) SubmitTask(_ context.Context, s Submission) error {
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: s.Input})
	if err != nil {
		return err
	}
	e.ID, e.SessionID, e.Seq = s.EnvelopeID, s.SessionID, 1
	b.mu.Lock()
	b.log = append(b.log, e)
	b.mu.Unlock()
	return nil
}

func (b *silentBackend) Events(context.Context, string, uint64) ([]messages.Envelope, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]messages.Envelope(nil), b.log...), nil
}

func (b *silentBackend) Watch(string) (<-chan messages.Envelope, func()) {
	return make(chan messages.Envelope), func() {}
}

func (b *silentBackend) Cancel(context.Context, string, string) error { return nil }

func (b *silentBackend) Approve(context.Context, string, string, bool, string) error { return nil }

// A stream whose task says nothing for a while gets SSE comments, between its
// events, in A2A 0.3 and 1.0: a client that gives up on a silent connection (the
// Python SDK's, after 5 s) keeps it.
func TestSilentStreamIsKeptAlive(t *testing.T) {
	s, err := NewServer(&silentBackend{}, ServerConfig{KeepAlive: 20 * time.Millisecond}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for version, body := range map[string]string{
		"0.3": `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m-03","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
		"1.0": `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m-10","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`,
	} {
		t.Run(version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/a2a", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(VersionHeader, version)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var lines []string
			events, comments := 0, 0
			for comments < 3 && sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "data: "):
					events++
				case line == ": keep-alive":
					// Between events: before the first, after an event's blank
					// line, or after another comment (the keep-alive ticks from the
					// header on, so on a loaded machine one can come first).
					prev := len(lines) - 1
					for prev >= 0 && lines[prev] == ": keep-alive" {
						prev--
					}
					if prev >= 0 && lines[prev] != "" {
						t.Fatalf("a comment inside an event: %q", lines)
					}
					comments++
				case line == "" && len(lines) > 0 && lines[len(lines)-1] == ": keep-alive":
					// A blank line dispatches an event, one with no data to a
					// parser that keeps the last id (httpx-sse).
					t.Fatalf("a blank line after a comment: %q", lines)
				}
				lines = append(lines, line)
			}
			if events < 2 || comments < 3 {
				t.Fatalf("%d events, %d comments (%v): %q", events, comments, sc.Err(), lines)
			}
		})
	}
}
