package mcp_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// bigToken is a progressToken past 2^53, which the server refuses in a request.
const bigToken = `{"_meta":{"progressToken":9007199254740993}`

// A notification is never answered (JSON-RPC), one whose progressToken is past
// 2^53 included: it is accepted (HTTP 202) as any other, where the server
// answered it as a request it refused (HTTP 400, an error of id null on stdio).
// A request whose id is neither a string nor a number has its id never echoed
// back, whatever else is wrong with it: it is answered with id null.
func TestServerProgressTokenOfANotificationOrOfABadID(t *testing.T) {
	var calls atomic.Int32
	srv, ctx := toolServer(t, countTool{&calls})
	note := `{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":` + bigToken + `}}`
	badID := `{"jsonrpc":"2.0","id":true,"method":"tools/call","params":` + bigToken + `,"name":"count","arguments":{}}}`

	t.Run("http", func(t *testing.T) {
		url, cs := sdkSession(ctx, t, srv)
		resp, raw := postRead(ctx, t, url, cs.ID(), note)
		if resp.StatusCode != http.StatusAccepted || len(strings.TrimSpace(string(raw))) != 0 {
			t.Errorf("a notification with a progressToken past 2^53: %s %q, want 202 and no answer", resp.Status, raw)
		}
		resp, raw = postRead(ctx, t, url, cs.ID(), badID)
		if a := httpAnswer(t, raw); string(a.ID) != "null" || a.Error == nil {
			t.Errorf("a request of id true: %s %q, want an error of id null", resp.Status, raw)
		}
		if got := calls.Load(); got != 0 {
			t.Errorf("the tool was called %d times", got)
		}
	})

	t.Run("stdio", func(t *testing.T) {
		inW, outR := stdioServe(ctx, t, srv)
		lines := linesOf(outR, 16)
		writeLines(t, inW,
			`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			note,
			badID,
			`{"jsonrpc":"2.0","id":"last","method":"ping"}`,
		)
		var got []string
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the server's output ended: %q", got)
				}
				got = append(got, line)
			case <-ctx.Done():
				t.Fatalf("no answer to the last request within 30 s: %q", got)
			}
			var a rpcAnswer
			if json.Unmarshal([]byte(got[len(got)-1]), &a) == nil && string(a.ID) == `"last"` {
				break
			}
		}
		// Between the answers to initialize and to the last ping: the one to the
		// request of id true, of id null, and nothing for the notification.
		var between []rpcAnswer
		for _, line := range got {
			var a rpcAnswer
			if json.Unmarshal([]byte(line), &a) == nil && len(a.ID) > 0 && string(a.ID) != `"init"` && string(a.ID) != `"last"` {
				between = append(between, a)
			}
		}
		if len(between) != 1 || string(between[0].ID) != "null" || between[0].Error == nil {
			t.Errorf("answers to a notification with a progressToken past 2^53 and to a request of id true: %+v, want one error, of id null\n%s", between, strings.Join(got, "\n"))
		}
		if got := calls.Load(); got != 0 {
			t.Errorf("the tool was called %d times", got)
		}
	})
}
