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

// A request over stdio that the SDK cannot decode (arguments nested deeper than
// its 1,000 levels, within the 10,000 the server reads) is answered -32600 with
// its id: answered with id null, its client waited for its answer until its
// timeout (the TypeScript SDK's 60 s) or for ever. The session goes on.
func TestServerStdioUndecodableRequestIsAnsweredWithItsID(t *testing.T) {
	var calls atomic.Int32
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{countTool{&calls}}})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_ = srv.Serve(ctx, mcp.LineTransport(inR, outW, 0))
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
	deep := strings.Repeat("[", 2000) + strings.Repeat("]", 2000)
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"method":"tools/call","params":{"name":"count","arguments":{"x":` + deep + `}},"jsonrpc":"2.0","id":7}`,
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
	if a, ok := byID["7"]; !ok || a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "depth") {
		t.Errorf("id 7: answered %v %+v; want -32600 saying it nests too deep (answers %v)", ok, a.Error, byID)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("count was called %d times, want once (the last call)", got)
	}
}
