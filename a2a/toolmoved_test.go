package a2a_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A remote agent that moved its endpoint (its card names another URL; the old one
// answers 404) is reached at the new one: the call that found the old one gone
// fetches the card again and sends its message there, rather than every call
// failing at the endpoint the tool read at its first call until the node restarts.
func TestToolFollowsAnAgentThatMovedItsEndpoint(t *testing.T) {
	var mu sync.Mutex
	endpoint := "/v1"
	var sent []string
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
			srv.URL+endpoint)
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, r.URL.Path)
		if r.URL.Path != endpoint {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_ = b
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":{"kind":"message","messageId":"a-%d","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"at %s"}]}}`, len(sent), endpoint)
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
	if err != nil || !strings.Contains(out, "at /v1") {
		t.Fatalf("first call: %q, %v", out, err)
	}
	mu.Lock()
	endpoint = "/v2"
	mu.Unlock()
	out, err = tool.Call(context.Background(), tools.Call{Key: "s/2", Arguments: `{"message":"hi again"}`})
	if err != nil || !strings.Contains(out, "at /v2") {
		t.Fatalf("after the agent moved: %q, %v; want its answer at its new endpoint", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/v1", "/v1", "/v2"}; fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("requests went to %v, want %v", sent, want)
	}
}
