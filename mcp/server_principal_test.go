package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// forgedPrincipal sends each request with a header that names a principal of
// its own making, as a hostile client could.
type forgedPrincipal struct{}

func (forgedPrincipal) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(mcp.PrincipalHeader, "token:forged")
	return http.DefaultTransport.RoundTrip(r)
}

// On a node with API tokens, a keyed direct call names a call among those of
// the token it is signed in with, not of the MCP session: a client that lost
// its session (a network blip, a restart) and sends its call again with the
// same idempotency key from a new session, the main use of such a key, gets
// the first call's answer and the tool is not called again; a client signed
// in with another token makes a call of its own under the same key. Before,
// the key named a call among the session's only, and the call sent again from
// the new session was performed a second time.
func TestServerKeyedCallSentAgainFromANewSessionOfTheSameToken(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{outwardTool{&mu, &seen}},
		HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{"token-one-0123456789abcdef", "token-two-0123456789abcdef"}}}})
	n.Handle("/mcp", mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	hs := httptest.NewServer(n.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	connect := func(rt http.RoundTripper) *sdk.ClientSession {
		t.Helper()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: rt}}, nil)
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
	calls := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	first := call(connect(bearer("token-one-0123456789abcdef")))
	again := call(connect(bearer("token-one-0123456789abcdef")))
	if again != first || calls() != 1 {
		t.Errorf("a keyed call sent again from a new session of the same token: %q (first %q), the tool called %d times; want the first answer, one call", again, first, calls())
	}
	other := call(connect(bearer("token-two-0123456789abcdef")))
	if other == first || calls() != 2 {
		t.Errorf("the same key from another token: %q (first %q), the tool called %d times; want a call of its own", other, first, calls())
	}
}

// A node without tokens knows no principal: a client cannot name one with a
// header of its own, and two sessions that send the same forged one make two
// calls under one key, as any two sessions do.
func TestServerPrincipalHeaderOfTheClientIsIgnored(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{outwardTool{&mu, &seen}}})
	n.Handle("/mcp", mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	hs := httptest.NewServer(n.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	var answers []string
	for range 2 {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: forgedPrincipal{}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "outward", Arguments: map[string]any{}, Meta: sdk.Meta{mcp.IdempotencyKeyMeta: "k-1"}})
		if err != nil || res.IsError {
			t.Fatalf("outward with key k-1: %v %q", err, textOf(res))
		}
		answers = append(answers, textOf(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || answers[0] == answers[1] {
		t.Errorf("two sessions with a forged principal header: the tool called %d times, answers %q; want two calls", len(seen), answers)
	}
}
