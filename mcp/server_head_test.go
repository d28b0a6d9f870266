package mcp_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// tooLargeHeaders are the headers of a POST whose Content-Length (10 MiB) is past
// what the server takes.
const tooLargeHeaders = "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
	"Content-Length: 10485760\r\n\r\n"

// tooLargeRequest connects to a server of its own and writes tooLargeHeaders,
// with no body: the connection, for the test to write the body or not.
func tooLargeRequest(t *testing.T) net.Conn {
	t.Helper()
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	t.Cleanup(hs.Close)
	c := dialHTTP(t, hs)
	if _, err := io.WriteString(c, tooLargeHeaders); err != nil {
		t.Fatal(err)
	}
	return c
}

// A request whose Content-Length is past the bound and whose body does not come
// is answered 413 (id null: no head holds one) by a server without a read timeout
// (Handler mounted on an http.Server of its own): the head of the body, read
// for the request's id, is waited for a short while, not until the server's read
// deadline, which there is none of.
func TestServerHTTPTooLargeWithoutItsBodyIsAnswered(t *testing.T) {
	c := tooLargeRequest(t)
	resp, raw := readRawAnswer(t, c, "no answer to headers past the bound with no body: %v; want 413")
	var a rpcAnswer
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(raw, &a) != nil || string(a.ID) != "null" || a.Error == nil || a.Error.Code != -32600 {
		t.Fatalf("%s %q, want 413 with a JSON-RPC error of id null", resp.Status, raw)
	}
}

// A request whose Content-Length is past the bound and whose body comes a few
// bytes at a time after its headers (as through a reverse proxy, or over HTTP/2,
// where the body's first bytes come in a frame of their own) is answered 413 with
// its id: the head of the body is read until it holds the id and the method, where
// one read got the first piece alone and the answer had id null.
func TestServerHTTPTooLargeInPiecesIsAnsweredWithItsID(t *testing.T) {
	c := tooLargeRequest(t)
	head := `{"jsonrpc":"2.0","id":"piece-1","method":"tools/call","params":{"name":"run_task","arguments":{"input":"`
	go func() {
		// Each piece is a write of its own (net.Conn does not buffer), a moment
		// after the one before, so that the server reads them apart.
		for p := head; p != ""; p = p[min(5, len(p)):] {
			time.Sleep(5 * time.Millisecond)
			if _, err := io.WriteString(c, p[:min(5, len(p))]); err != nil {
				return
			}
		}
	}()
	resp, raw := readRawAnswer(t, c, "no answer to a body past the bound sent in pieces: %v; want 413")
	var a rpcAnswer
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(raw, &a) != nil || string(a.ID) != `"piece-1"` || a.Error == nil || a.Error.Code != -32600 {
		t.Fatalf("%s %q, want 413 with a JSON-RPC error of id \"piece-1\"", resp.Status, raw)
	}
}
