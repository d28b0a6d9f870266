package mcp_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/tools"
)

// notUTF8Call is a tools/call of count (id 7) whose arguments hold a byte that is
// not UTF-8 (0xff, byte 93 of the message).
const notUTF8Call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{"note":"a` + "\xff" + `b"}}}`

// rpcAnswer is a JSON-RPC answer as the tests read it.
type rpcAnswer struct {
	ID     json.RawMessage
	Result *sdk.CallToolResult
	Error  *struct {
		Code    int
		Message string
	}
}

// checkNotUTF8Answer fails the test unless a is the parse error of notUTF8Call.
func checkNotUTF8Answer(t *testing.T, how string, a rpcAnswer) {
	t.Helper()
	if a.Error == nil || a.Error.Code != -32700 || string(a.ID) != "7" ||
		!strings.Contains(a.Error.Message, "not valid UTF-8 (byte 93)") {
		t.Errorf("%s: a call that is not UTF-8 was answered %s %+v %+v, want the parse error -32700 of id 7 naming byte 93", how, a.ID, a.Error, a.Result)
	}
}

// A message that is JSON but not UTF-8 (a byte 0xff in a string), over Streamable
// HTTP or stdio, is answered with JSON-RPC's parse error, with its request's id
// and the offset of the bad byte, and calls nothing; the session goes on. The
// SDK decoded it with U+FFFD for the bad bytes, and the node called the tool, or
// ran a task, on an input its client never sent, where POST /v1/tasks and A2A
// refuse such a body.
func TestServerRefusesAMessageNotUTF8(t *testing.T) {
	var calls atomic.Int32
	srv, ctx := toolServer(t, tools.Calculator{}, countTool{&calls})

	t.Run("http", func(t *testing.T) {
		url, cs := sdkSession(ctx, t, srv)
		resp, raw := postRead(ctx, t, url, cs.ID(), notUTF8Call)
		var a rpcAnswer
		if err := json.Unmarshal(raw, &a); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a call that is not UTF-8: %s %q", resp.Status, raw)
		}
		checkNotUTF8Answer(t, "over HTTP", a)
		if got := calls.Load(); got != 0 {
			t.Errorf("the tool was called %d times", got)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "6*7"}})
		if err != nil || res.IsError || textOf(res) != "42" {
			t.Errorf("the session after it: %v %+v", err, res)
		}
	})

	t.Run("stdio", func(t *testing.T) {
		inW, outR := stdioServe(ctx, t, srv)
		answers := answersOf(outR, 8)
		writeLines(t, inW,
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			notUTF8Call,
			`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"calculator","arguments":{"expression":"6*7"}}}`,
		)
		// The filter answers the bad line itself, maybe before the SDK answers
		// the lines before it.
		byID := map[string]rpcAnswer{}
		for len(byID) < 3 {
			select {
			case a, ok := <-answers:
				if !ok {
					t.Fatalf("the server's output ended; answers %v", byID)
				}
				byID[string(a.ID)] = a
			case <-ctx.Done():
				t.Fatalf("not three answers within 30 s: %v", byID)
			}
		}
		if a := byID["1"]; a.Error != nil {
			t.Fatalf("initialize: %+v", a.Error)
		}
		checkNotUTF8Answer(t, "over stdio", byID["7"])
		if a := byID["8"]; a.Result == nil || textOf(a.Result) != "42" {
			t.Errorf("the session after it: %+v %+v", a.Error, a.Result)
		}
		if got := calls.Load(); got != 0 {
			t.Errorf("the tool was called %d times", got)
		}
	})
}
