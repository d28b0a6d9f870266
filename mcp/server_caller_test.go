package mcp_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// outwardTool answers each call with the name the call has outside the node
// (tools.Call.OutwardKey: what a remote tool, an MCP server's or an A2A
// agent's, dedupes by), and keeps them.
type outwardTool struct {
	mu   *sync.Mutex
	seen *[]string
}

func (outwardTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "outward", Description: "answers its call's outward key", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (o outwardTool) Call(_ context.Context, c tools.Call) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*o.seen = append(*o.seen, c.OutwardKey())
	return c.OutwardKey(), nil
}

// Two MCP clients of one node that name their calls with the same idempotency
// key (a counter from 1, a fixed "retry-safe") make two calls: each is
// performed, under an outward key of its own, unique per (client session,
// call) as a session's effects are per (session, seq), and in the form of
// theirs ("troupe-" and a digest). The same client sending its call again is
// answered from memory. Before, the key alone named the call: the second
// client got the first one's answer (its output, whatever it held) without its
// tool being called, and the key a remote tool saw, "direct:<digest>/1", was
// the same for every client of every node that used that key.
func TestServerKeyedCallsOfTwoClientsDoNotMeet(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{outwardTool{&mu, &seen}}})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	connectHTTP := func() *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	call := func(cs *sdk.ClientSession) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "outward", Arguments: map[string]any{}, Meta: sdk.Meta{mcp.IdempotencyKeyMeta: "k-1"}})
		if err != nil || res.IsError {
			t.Fatalf("outward with key k-1: %v %q", err, textOf(res))
		}
		return textOf(res)
	}
	a, b := connectHTTP(), connectHTTP()
	first := call(a)
	second := call(b)
	if again := call(a); again != first {
		t.Errorf("client A's call sent again: %q, want its first answer %q", again, first)
	}
	mu.Lock()
	calls := len(seen)
	mu.Unlock()
	if calls != 2 || first == second {
		t.Errorf("two clients' calls under one key: the tool was called %d times, outward keys %q and %q; want two calls under two keys", calls, first, second)
	}
	for _, k := range []string{first, second} {
		if !strings.HasPrefix(k, "troupe-") || strings.Contains(k, "direct") {
			t.Errorf("outward key of a direct call: %q; want troupe-<digest>, as a session's", k)
		}
	}
}
