package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A logging/setLevel of a level that is none of the protocol's eight is refused
// as invalid params (-32602) and recorded nowhere: it was answered {} and
// recorded in the session's stream of the log, whatever its size (up to the
// body's bound, 2 MiB a request, every distinct one another event).
func TestServerRefusesAnUnknownLogLevel(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, level := range []string{"bogus", "", "INFO", strings.Repeat("x", 1<<20)} {
		b, _ := json.Marshal(level)
		resp := post(ctx, t, hs.URL, cs.ID(), `{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":`+string(b)+`}}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if a := httpAnswer(t, raw); a.Error == nil || a.Error.Code != -32602 || !strings.Contains(a.Error.Message, "level") {
			t.Errorf("level %.20q: %s error %+v; want invalid params -32602 naming the level", level, resp.Status, a.Error)
		}
	}
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Errorf("a good level after them: %v", err)
	}
	events, err := n.Log().Read(ctx, eventlog.MCPSessionStreamPrefix+cs.ID(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, e := range events {
		if e.Type == messages.TypeMCPLevelSet {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			levels = append(levels, p.(*messages.MCPLevelSet).Level)
		}
	}
	if len(levels) != 1 || levels[0] != "warning" {
		t.Errorf("levels recorded: %.80q, want [warning]", levels)
	}
}
