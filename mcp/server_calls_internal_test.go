package mcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A tools/call is held (recorded, so that its stream outlives a restart) as
// the SDK reads it: with case-sensitive keys, the first of a repeated one. Read
// with encoding/json (any case, the last), a key repeated in capitals left a
// call the SDK serves unheld ("METHOD"), or held it under another ID than the
// one the SDK answers ("ID"); and what the SDK reads as no call was held.
func TestHoldCallReadsTheRequestAsTheSDK(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	s := NewServer(n, ServerOptions{})
	const params = `"params":{"name":"run_task","arguments":{"input":"x"}}`
	for _, tc := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call",` + params + `}`, `2`},
		{`{"jsonrpc":"2.0","id":"a<b","method":"tools/call",` + params + `}`, `"a<b"`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call",` + params + `,"METHOD":""}`, `2`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call",` + params + `,"ID":7}`, `2`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call",` + params + `,"ID":null}`, `2`},
		{`{"jsonrpc":"2.0","method":"tools/call",` + params + `,"ID":7}`, ``},
		{`{"jsonrpc":"2.0","id":2,"METHOD":"tools/call",` + params + `}`, ``},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, ``},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		r.Header.Set("Mcp-Session-Id", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
		r, forget := s.holdCall(r)
		got := ""
		if c, ok := r.Context().Value(pendingKey{}).(*pendingCall); ok {
			got = c.rpcID
		}
		if held := r.Header.Get(callHeader) != ""; held != (tc.want != "") {
			t.Errorf("%s: held %v, want %v", tc.body, held, tc.want != "")
		}
		if got != tc.want {
			t.Errorf("%s: held with ID %q, want %q", tc.body, got, tc.want)
		}
		forget()
	}
}
