package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A message the old endpoint ran before it went down (a redeploy) is not sent
// again at the endpoint the card names now: Go's transport sends a POST with an
// Idempotency-Key again on a new connection when a reused one closes unanswered,
// and when that dial fails its error alone comes back, though the request had
// reached the agent. Only a dial error of a request that wrote nothing counts as
// reaching no endpoint.
func TestToolDoesNotSendAgainAMessageTheOldEndpointRan(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	var endpoint string
	answer := func(w http.ResponseWriter, where string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":{"kind":"message","messageId":"a","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"at %s"}]}}`, where)
	}
	var a *httptest.Server
	a = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		ran = append(ran, "A")
		mu.Unlock()
		if strings.Contains(string(b), `"s/2"`) { // runs it, then the old deployment goes away
			a.Listener.Close()
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		answer(w, "A")
	}))
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		ran = append(ran, "B")
		mu.Unlock()
		answer(w, "B")
	}))
	defer b.Close()
	endpoint = a.URL + "/rpc"
	card := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"fake","description":"d","version":"1","url":%q,"preferredTransport":"JSONRPC","protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`, endpoint)
	}))
	defer card.Close()
	tool, _ := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: card.URL + a2a.CardPath})
	if _, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"one"}`}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	endpoint = b.URL + "/rpc"
	mu.Unlock()
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/2", Arguments: `{"message":"two"}`})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("out=%q err=%v ran=%v", out, err, ran)
	if fmt.Sprint(ran) != "[A A]" {
		t.Errorf("message s/2 ran at %v after the first call; want once (A), the call failing", ran[1:])
	}
}

// A task event in input-required (an interrupted state, which ends an answer as
// a final status update does) ends the answer though the stream stays open: the
// tool does not wait out its timeout and cancel a task that waits for input.
func TestToolAnswersAtATaskThatNeedsInput(t *testing.T) {
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, r *http.Request, id, _ json.RawMessage) {
			sse(w, id, `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"input-required","message":{"kind":"message","messageId":"q","role":"agent","parts":[{"kind":"text","text":"which city?"}]}}}`)
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
					fmt.Fprint(w, ": keep-alive\n\n")
					w.(http.Flusher).Flush()
				}
			}
		},
		"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, canceled)
		},
	})
	tool, _ := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, CallTimeout: time.Second})
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/ir", Arguments: `{"message":"weather"}`})
	if err != nil || !strings.Contains(out, "which city?") {
		t.Errorf("Call = %q, %v; want the input-required question at once", out, err)
	}
}
