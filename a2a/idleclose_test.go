package a2a_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

type connKey struct{}

// A remote agent (or a proxy before it) that closes a kept-alive connection as
// the a2a tool sends its message on it (its idle timeout racing the request): the
// tool's HTTP client sends the message again on a new connection, with the same
// Idempotency-Key (the message's ID, the call's key), and the call succeeds. A
// POST without the header is not sent again by Go's client: the call failed with
// EOF.
func TestToolSendsAgainWhenTheServerClosesAKeptConnection(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%t", streaming), func(t *testing.T) {
			var (
				cut  atomic.Bool
				mu   sync.Mutex
				keys []string
				srv  *httptest.Server
			)
			mux := http.NewServeMux()
			mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
				r.Context().Value(connKey{}).(*atomic.Int64).Add(1)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
					"protocolVersion":"0.3.0","capabilities":{"streaming":%t},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
					srv.URL+"/rpc", streaming)
			})
			mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				mu.Lock()
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				if r.Context().Value(connKey{}).(*atomic.Int64).Add(1) > 1 && cut.CompareAndSwap(false, true) {
					// The connection was kept from the card's request: close it unanswered.
					conn, _, err := w.(http.Hijacker).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					conn.Close()
					return
				}
				result := `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"completed"},"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"42"}]}]}`
				if streaming {
					sse(w, []byte("1"), result)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":%s}`, result)
			})
			srv = httptest.NewUnstartedServer(mux)
			srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
				return context.WithValue(ctx, connKey{}, new(atomic.Int64))
			}
			srv.Start()
			t.Cleanup(srv.Close)
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Call(context.Background(), tools.Call{Key: "sess/7", Arguments: `{"message":"6*7?"}`})
			if err != nil || out != "42\n\n(context_id: c-1)" {
				t.Fatalf("Call = %q, %v", out, err)
			}
			if !cut.Load() {
				t.Fatal("the message was not sent on the card's kept connection: the test cut nothing")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(keys) != 2 || keys[0] != "sess/7" || keys[1] != "sess/7" {
				t.Fatalf("Idempotency-Key of the requests: %q, want the message's ID twice", keys)
			}
		})
	}
}
