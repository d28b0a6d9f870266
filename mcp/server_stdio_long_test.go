package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A request over stdio longer than the server takes is answered -32600 with its
// id, wherever the id stands in it (the Python SDK writes it first, the
// TypeScript SDK last): answered with id null, its client waited for its answer
// for ever (the Python SDK's call, which has no timeout by default, hung on a
// 20 MB argument to `node mcp`). The session goes on.
func TestServerStdioTooLongRequestIsAnsweredWithItsID(t *testing.T) {
	var calls atomic.Int32
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{countTool{&calls}}})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_ = srv.Serve(ctx, mcp.LineTransport(inR, outW, 4096))
		outW.Close()
	}()
	defer inW.Close()
	answers := make(chan rpcAnswer, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var a rpcAnswer
			if json.Unmarshal(sc.Bytes(), &a) == nil {
				answers <- a
			}
		}
		close(answers)
	}()
	big := strings.Repeat("x", 10_000)
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{"note":"` + big + `"}}}`,
		`{"method":"tools/call","params":{"name":"count","arguments":{"note":"` + big + `","nested":{"id":1,"s":"\"}"}}},"jsonrpc":"2.0","id":"ts-8"}`,
		`{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"count","arguments":{}}}`,
	} {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	byID := map[string]rpcAnswer{}
	for byID[`"last"`].ID == nil {
		select {
		case a, ok := <-answers:
			if !ok {
				t.Fatalf("the server's output ended; answers %v", byID)
			}
			byID[string(a.ID)] = a
		case <-ctx.Done():
			t.Fatalf("no answer to the last call within 30 s: %v", byID)
		}
	}
	for _, id := range []string{"7", `"ts-8"`} {
		if a, ok := byID[id]; !ok || a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "larger than 4096 bytes") {
			t.Errorf("id %s: answered %v %+v; want -32600 saying the message is larger than 4096 bytes (answers %v)", id, ok, a.Error, byID)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("count was called %d times, want once (the last call)", got)
	}
}
