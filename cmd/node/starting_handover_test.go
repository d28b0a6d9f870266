package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// The port that answered while the node started is handed to the node's own
// server without dropping a client: a request whose head arrives as the
// handover begins is answered (by the answers of a node starting: it was
// accepted then), and so is one on a connection opened during the wait that
// had sent nothing yet; the connections accepted after the handover reach the
// node's server. Before, the handover shut the starting server down, which
// closes a connection whose request it reads then without an answer, and
// waited for the silent connection until its own bound (2 s), then closed it:
// a probe or a client's request got EOF, and the port served nothing for those
// 2 s although the node was ready.
func TestServeStartingHandsOverWithoutDroppingAConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	handOver := serveStarting(ln, node.Config{Logger: slog.New(slog.DiscardHandler), DataDir: t.TempDir()})
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		t.Cleanup(func() { c.Close() })
		return c
	}
	answer := func(c net.Conn, what string) string {
		t.Helper()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.Status + " " + string(b)
	}
	// Served by the starting server: both are accepted before the handover
	// (a first request on each answered proves it for one; the other, silent,
	// is accepted once the first connection after it is).
	silent := dial()
	half := dial()
	if _, err := io.WriteString(half, "GET /livez HTTP/1.1\r\nHost: node\r\n"); err != nil {
		t.Fatal(err)
	}
	probe, err := http.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	probe.Body.Close()
	if probe.StatusCode != http.StatusOK {
		t.Fatalf("GET /livez while the node starts answered %s", probe.Status)
	}
	handedOver := make(chan struct{})
	go func() { handOver(); close(handedOver) }()
	if _, err := io.WriteString(half, "\r\n"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the request under way at the handover: %s", answer(half, "the request whose head came as the handover began"))
	select {
	case <-handedOver:
	case <-time.After(20 * time.Second):
		t.Fatal("the handover did not end")
	}
	real := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "node") })}
	go func() { _ = real.Serve(ln) }()
	defer real.Close()
	if _, err := io.WriteString(silent, "GET /livez HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the connection silent until the handover: %s", answer(silent, "the request on a connection opened while the node started, sent after the handover"))
	after := dial()
	if _, err := io.WriteString(after, "GET /livez HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := answer(after, "a request after the handover"); got != "200 OK node" {
		t.Fatalf("a request after the handover answered %q, want the node's server", got)
	}
}
