package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// echoServer is a go-sdk server with one tool, "echo", that answers its text.
func echoServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "echo", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Answers its text"},
		func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Text}}}, nil, nil
		})
	return srv
}

// headerLog records the values of the headers of the requests it saw.
type headerLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		for k, v := range r.Header {
			h.seen = append(h.seen, k+": "+strings.Join(v, ","))
		}
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (h *headerLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.seen, "\n")
}

// A server configured with secret headers that redirects the node to another host:
// the other host never gets the headers (Go's client drops Authorization on such a
// redirect, but the configured headers are the node's to place).
func TestRedirectToAnotherHostKeepsTheHeaders(t *testing.T) {
	var other headerLog
	elsewhere := httptest.NewServer(other.wrap(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return echoServer() }, nil)))
	t.Cleanup(elsewhere.Close)
	// The configured server is 127.0.0.1; the one it sends the node to, "localhost":
	// another host name for the same machine.
	target := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1) + "/mcp"
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)

	c := startClient(t, map[string]mcp.ServerConfig{"moved": {URL: redirector.URL + "/mcp",
		Headers: map[string]string{"Authorization": "Bearer secret-token", "X-Api-Key": "secret-key"}}}, nil)
	_, _ = tryCall(c, "moved__echo", `{"text":"hi"}`)
	seen := other.String()
	if seen == "" {
		t.Fatal("the node never reached the host it was redirected to")
	}
	if strings.Contains(seen, "secret") {
		t.Errorf("the host the node was redirected to got the configured headers:\n%s", seen)
	}
}

// tryCall calls name if the catalog has it.
func tryCall(c *mcp.Client, name, args string) (string, error) {
	tool, ok := c.Tool(name)
	if !ok {
		return "", fmt.Errorf("no tool %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tool.Call(ctx, tools.Call{Key: "test-session/1", Arguments: args})
}

// hijackCalls serves the go-sdk server srv over Streamable HTTP, except the
// tools/call requests of the tool named tool, which answer writes.
func hijackCalls(srv *sdk.Server, tool string, answer func(w http.ResponseWriter, r *http.Request, id json.RawMessage)) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &req) == nil && req.Method == "tools/call" && req.Params.Name == tool {
				answer(w, r, req.ID)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// A server whose answer to a call is a JSON body that does not end (a 2 GB body, or
// one that stalls after 32 MiB): the node stops reading it at a bound, and the call
// fails saying so, instead of reading it into memory until the tool's timeout.
func TestEndlessJSONBody(t *testing.T) {
	srv := echoServer()
	sdk.AddTool(srv, &sdk.Tool{Name: "flood", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("not reached")
		})
	flood := hijackCalls(srv, "flood", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for range 32 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done() // and never ends
	})
	hs := httptest.NewServer(flood)
	t.Cleanup(hs.Close)
	c := startClient(t, map[string]mcp.ServerConfig{"flood": {URL: hs.URL}}, nil)
	tool, ok := c.Tool("flood__flood")
	if !ok {
		t.Fatalf("no flood__flood: %v (%+v)", names(c), c.Status())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := tool.Call(ctx, tools.Call{Key: "s/1", Arguments: "{}"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("the call answered %v, want a failure naming the bound", err)
	}
	t.Log(err)
	if out := mustCall(t, c, "flood__echo", `{"text":"still here"}`); out != "still here" {
		t.Errorf("echo after the flood answered %q", out)
	}
}
