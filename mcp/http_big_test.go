package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// An HTTP server's answer larger than the node reads of one message (16 MiB), as a
// JSON body or as one event of a stream, whole or endless, fails its call alone,
// with an error that says so: the tool is performed once and the connection stays.
// A JSON body failed the connection, and the call was sent again to the server,
// which performed it a second time; an event of a stream had no bound at all (the
// SDK's StreamableClientTransport.MaxEventSize of 0 is documented as its default,
// 16 MiB, and is none): 20 MB were read whole, and an endless event was read into
// memory until the call's timeout.
func TestHTTPAnswerLargerThanTheNodeReads(t *testing.T) {
	head := func(id json.RawMessage) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	}
	big := strings.Repeat("x", 20<<20)
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request, id json.RawMessage)
	}{
		{"json", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, head(id)+big+`"}]}}`)
		}},
		{"event", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message\ndata: "+head(id)+big+"\"}]}}\n\n")
		}},
		{"endless event", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message\ndata: "+head(id))
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for range 32 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := echoServer()
			sdk.AddTool(srv, &sdk.Tool{Name: "big", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
					return nil, nil, errors.New("not reached")
				})
			var performed atomic.Int32
			hs := httptest.NewServer(hijackCalls(srv, "big", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
				performed.Add(1)
				c.answer(w, r, id)
			}))
			t.Cleanup(hs.Close)
			cl := startClient(t, map[string]mcp.ServerConfig{"big": {URL: hs.URL}}, nil)
			tool, ok := cl.Tool("big__big")
			if !ok {
				t.Fatalf("no big__big: %v (%+v)", names(cl), cl.Status())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := tool.Call(ctx, tools.Call{Key: "s/1", Arguments: "{}"})
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the most the node reads of one message") {
				t.Errorf("the call answered %v, want a failure naming the bound", err)
			}
			if n := performed.Load(); n != 1 {
				t.Errorf("the tool was performed %d times, want once", n)
			}
			if out := mustCall(t, cl, "big__echo", `{"text":"still here"}`); out != "still here" {
				t.Errorf("echo after the answer answered %q", out)
			}
			if st := cl.Status()[0]; st.Connects != 1 {
				t.Errorf("status %+v, want the first connection kept", st)
			}
		})
	}
}
