package mcp_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/troupe-run/troupe/mcp"
)

// A client whose connection died unseen (the server still writes the call's
// answer into it) resumes the call's stream at once, and gets it: the
// resumption takes the stream over from the request that wrote it, and the call
// goes on. Before, the SDK answered 409 Conflict until the server saw the old
// connection gone, minutes later on a dead network, and the SDKs' clients, which
// try a resumption two or three times, seconds apart, gave the call up.
func TestServerHTTPResumptionTakesOverAStreamStillWritten(t *testing.T) {
	c := &cutNode{gateNode: gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}, cut: make(chan error, 1)}
	srv := mcp.NewServer(c, mcp.ServerOptions{ProgressInterval: 50 * time.Millisecond, Logger: slog.New(&records{})})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := post(ctx, t, hs.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if id == "" {
		t.Fatalf("initialize answered %s with no session", resp.Status)
	}
	post(ctx, t, hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	// The call's POST, whose connection stays open: the server goes on writing to it.
	old := post(ctx, t, hs.URL, id, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gate","arguments":{}}}`)
	defer old.Body.Close()
	var last string
	sc := bufio.NewScanner(old.Body)
	for last == "" && sc.Scan() {
		last, _ = strings.CutPrefix(sc.Text(), "id: ")
	}
	if last == "" {
		t.Fatalf("the call's stream carried no event ID: %v", sc.Err())
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Set("Last-Event-ID", last)
	resumed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Body.Close()
	if resumed.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resumed.Body)
		t.Fatalf("the resumption answered %s: %s", resumed.Status, b)
	}
	close(c.release)
	rs := bufio.NewScanner(resumed.Body)
	for rs.Scan() {
		if line := rs.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"id":7`) {
			if !strings.Contains(line, "opened") {
				t.Fatalf("the call answered %s", line)
			}
			select {
			case err := <-c.cut:
				t.Fatalf("the call was cut off: %v", err)
			default:
			}
			return
		}
	}
	t.Fatalf("the resumed stream ended without the call's answer: %v", rs.Err())
}

// bearer sends each request with its token.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// ask sends a request of method (a POST of body, or a GET resuming after event
// last) in session id with c.
func ask(ctx context.Context, t *testing.T, c *http.Client, url, id, body, last string) *http.Response {
	t.Helper()
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Where a session belongs to the user whose token started it (a handler behind
// auth.RequireBearerToken whose tokens name users), a resumption of one of its
// streams with another user's token is refused (403, by the SDK) and leaves the
// stream to the request that writes it: it ended that request first, cutting
// the owner's stream for a request that was then refused.
func TestServerHTTPResumptionOfAnotherUsersStreamTakesNothingOver(t *testing.T) {
	c := &cutNode{gateNode: gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}, cut: make(chan error, 1)}
	srv := mcp.NewServer(c, mcp.ServerOptions{ProgressInterval: 50 * time.Millisecond, Logger: slog.New(&records{})})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
	}
	hs := httptest.NewServer(auth.RequireBearerToken(verify, nil)(srv.Handler()))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice, mallory := &http.Client{Transport: bearer("alice")}, &http.Client{Transport: bearer("mallory")}
	resp := ask(ctx, t, alice, hs.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "")
	id := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if id == "" {
		t.Fatalf("initialize answered %s with no session", resp.Status)
	}
	ask(ctx, t, alice, hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "").Body.Close()
	call := ask(ctx, t, alice, hs.URL, id, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gate","arguments":{}}}`, "")
	defer call.Body.Close()
	var last string
	sc := bufio.NewScanner(call.Body)
	for last == "" && sc.Scan() {
		last, _ = strings.CutPrefix(sc.Text(), "id: ")
	}
	if last == "" {
		t.Fatalf("the call's stream carried no event ID: %v", sc.Err())
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	other := ask(ctx, t, mallory, hs.URL, id, "", last)
	_, _ = io.Copy(io.Discard, other.Body)
	other.Body.Close()
	if other.StatusCode != http.StatusForbidden {
		t.Fatalf("another user's resumption answered %s, want 403", other.Status)
	}
	close(c.release)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"id":7`) {
			if !strings.Contains(line, "opened") {
				t.Fatalf("the call answered %s", line)
			}
			return
		}
	}
	t.Fatalf("the owner's stream ended without the call's answer: %v", sc.Err())
}

// A request that resumes a session (the first after a restart, here a call)
// does not write the streams the resumption opens, the session's stream of
// notifications among them: the client's GET of that stream, opened again with
// its last event ID, took it over from the call and cut the call's stream.
func TestServerHTTPResumingAStreamOfNotificationsLeavesTheCallThatResumedTheSession(t *testing.T) {
	c := &cutNode{gateNode: gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}, cut: make(chan error, 1)}
	srv := mcp.NewServer(c, mcp.ServerOptions{ProgressInterval: 50 * time.Millisecond, Logger: slog.New(&records{})})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rand.Text() // a session of this node's before a restart
	call := ask(ctx, t, http.DefaultClient, hs.URL, id, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gate","arguments":{}}}`, "")
	defer call.Body.Close()
	if call.StatusCode != http.StatusOK {
		t.Fatalf("the call answered %s", call.Status)
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	stream := ask(ctx, t, http.DefaultClient, hs.URL, id, "", "_3")
	stream.Body.Close()
	close(c.release)
	sc := bufio.NewScanner(call.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"id":7`) {
			if !strings.Contains(line, "opened") {
				t.Fatalf("the call answered %s", line)
			}
			return
		}
	}
	t.Fatalf("the call's stream ended without its answer: %v", sc.Err())
}

// A client whose network dropped opens the session's stream of notifications
// (GET, without a Last-Event-ID) again while its first GET lingers on the dead
// connection, unseen by the server, and gets it: the new GET takes the stream
// over and the old one ends. Before, the SDK answered 409 Conflict until the
// server saw the old connection gone, minutes later, and the client got no
// notifications again. Another user's GET takes nothing over.
func TestServerHTTPStreamOfNotificationsOpenedAgainTakesItOver(t *testing.T) {
	srv := mcp.NewServer(&gateNode{}, mcp.ServerOptions{Logger: slog.New(&records{})})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
	}
	hs := httptest.NewServer(auth.RequireBearerToken(verify, nil)(srv.Handler()))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice, mallory := &http.Client{Transport: bearer("alice")}, &http.Client{Transport: bearer("mallory")}
	resp := ask(ctx, t, alice, hs.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "")
	id := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if id == "" {
		t.Fatalf("initialize answered %s with no session", resp.Status)
	}
	ask(ctx, t, alice, hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "").Body.Close()
	// The first GET, whose connection stays open: the server still holds it.
	old := ask(ctx, t, alice, hs.URL, id, "", "")
	defer old.Body.Close()
	if old.StatusCode != http.StatusOK {
		t.Fatalf("the first GET answered %s", old.Status)
	}
	other := ask(ctx, t, mallory, hs.URL, id, "", "")
	_, _ = io.Copy(io.Discard, other.Body)
	other.Body.Close()
	if other.StatusCode == http.StatusOK {
		t.Fatal("another user's GET of the stream of notifications was answered 200")
	}
	again := ask(ctx, t, alice, hs.URL, id, "", "")
	defer again.Body.Close()
	if again.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(again.Body)
		t.Fatalf("the GET opened again answered %s: %s", again.Status, b)
	}
	// The first GET ends (cut short: the server ended its request).
	_, _ = io.Copy(io.Discard, old.Body)
	if ctx.Err() != nil {
		t.Fatal("the first GET did not end")
	}
}
