package mcp_test

import (
	"testing"
	"time"
)

// A JSON-RPC message after a byte order mark (a request file an editor saved
// with one, piped to the server's stdin) is read as its JSON, as the node reads
// every JSON a user sends (messages.TrimByteOrderMark); it was answered -32700,
// "the line is not JSON".
func TestStdioMessageAfterAByteOrderMark(t *testing.T) {
	srv, ctx := toolServer(t)
	in, out := stdioServe(ctx, t, srv)
	answers := answersOf(out, 4)
	writeLines(t, in, "\ufeff"+`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bom","version":"1"}}}`)
	select {
	case a, ok := <-answers:
		if !ok || a.Error != nil || string(a.ID) != "1" {
			t.Fatalf("initialize after a byte order mark: %+v %v", a.Error, ok)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to initialize after a byte order mark")
	}
}
