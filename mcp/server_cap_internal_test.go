package mcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// liveSessions counts the server's sessions over Streamable HTTP.
func (s *Server) liveSessions() int {
	n := 0
	for ss := range s.srv.Sessions() {
		if ss.ID() != "" {
			n++
		}
	}
	return n
}

// capServer starts a node and an MCP server on it with opts, served over HTTP
// until the test ends, and returns them with a context of a minute for the
// test's requests.
func capServer(t *testing.T, opts ServerOptions) (*Server, *httptest.Server, context.Context) {
	t.Helper()
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	s := NewServer(n, opts)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return s, hs, ctx
}

// connectClient connects the SDK's client, named name, to the server at url
// over Streamable HTTP, until the test ends.
func connectClient(ctx context.Context, t *testing.T, url, name string) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// notifyWaitingClose returns a channel that gets the session ID of the first
// request found waiting for the close of its session (more are dropped).
func notifyWaitingClose(s *Server) <-chan string {
	waiting := make(chan string, 1)
	s.waitingClose = func(id string) {
		select {
		case waiting <- id:
		default:
		}
	}
	return waiting
}

// listToolsIn posts a tools/list in session id at url and fails the test, as
// what, unless it is answered with a result.
func listToolsIn(ctx context.Context, t *testing.T, url, id, what string) {
	t.Helper()
	if status, body, err := postIn(ctx, url, id, listTools); err != nil || status != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("%s: %d %q %v", what, status, body, err)
	}
}

// waitSessionsAtMost waits until the server holds n sessions or fewer, and calls
// overdue with the number it holds if it still holds more after 20 seconds.
func waitSessionsAtMost(t *testing.T, s *Server, n int, overdue func(got int)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for got := s.liveSessions(); got > n; got = s.liveSessions() {
		if time.Now().After(deadline) {
			overdue(got)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// A client that opens sessions in a loop (initialize, never DELETE) grew the
// server's sessions without bound for a whole session timeout. The server holds
// MaxSessions at most: a new one closes the session idle the longest, whose
// client goes on in it, resumed, at its next request.
func TestServerHTTPSessionsAreCapped(t *testing.T) {
	const max = 3
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: max})
	cs := connectClient(ctx, t, hs.URL, "test")
	for i := range 30 {
		initializeOver(ctx, t, hs.URL)
		// The SDK forgets a closed session a moment after.
		waitSessionsAtMost(t, s, max, func(got int) {
			t.Fatalf("after %d sessions opened, the server holds %d, more than %d", i+2, got, max)
		})
	}
	s.use.mu.Lock()
	marked := len(s.use.last)
	s.use.mu.Unlock()
	if marked > max+1 {
		t.Errorf("the server marks %d sessions' use", marked)
	}
	// The SDK's client, which holds its stream, goes on in its session.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("the first client's session: %v", err)
	}
}

// A session the SDK lists before the request that starts it is answered (an
// initialize under way) has no request marked yet. It was taken for the session
// idle the longest and closed by another request's cap while the SDK was still
// connecting it: a data race inside the SDK, and a new client's session closed
// as it began. Such a session is left to the request starting it.
func TestServerHTTPCapLeavesASessionBeingStarted(t *testing.T) {
	const max = 2
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: max})
	// The session being started: made by the SDK's own handler on s's server, so
	// that nothing of s marks a request in it, as while its initialize runs.
	starting := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, nil))
	defer starting.Close()
	unmarked := initializeOver(ctx, t, starting.URL)
	for range max + 2 {
		initializeOver(ctx, t, hs.URL)
	}
	if !s.known(unmarked) {
		t.Fatal("the cap closed a session whose start was under way")
	}
	s.use.mu.Lock()
	closing := s.use.closing[unmarked] != nil
	s.use.mu.Unlock()
	if closing {
		t.Fatal("the cap closed a session whose start was under way")
	}
}

// A session being started does not count toward MaxSessions either: the
// request that starts it runs the cap once it is, and a session the SDK makes
// for a request outside any session (the Go SDK's client sends server/discover
// before its initialize) ends with that request. Counted, it took the place of
// a session the cap then closed for nothing.
func TestServerHTTPCapDoesNotCountASessionBeingStarted(t *testing.T) {
	const max = 2
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: max})
	// Made by the SDK's own handler on s's server, as in
	// TestServerHTTPCapLeavesASessionBeingStarted.
	starting := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, nil))
	defer starting.Close()
	initializeOver(ctx, t, starting.URL)
	var closed atomic.Int64
	s.capClosing = func(string) { closed.Add(1) }
	for range max {
		initializeOver(ctx, t, hs.URL)
	}
	if got := closed.Load(); got != 0 {
		t.Fatalf("the cap closed %d sessions of the %d started, with MaxSessions %d", got, max, max)
	}
}

// initializeOver starts a session at url with a bare initialize, as a client in a
// loop does, and returns its ID once the server's handler returned.
func initializeOver(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	resp, err := http.DefaultClient.Do(initializeRequest(ctx, url))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // to its end: the server's handler, and its cap, are done
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %s", resp.Status)
	}
	return id
}

// A request the server took in a session, on its way to the SDK's handler when
// a new session puts the server over MaxSessions, is answered: the cap leaves a
// session with a request under way. It closed it, and the request was cut (the
// SDK took it in the closing session and ended its stream with no answer, which
// the client then failed with 400 from the resumed session) or answered 404.
func TestServerHTTPCapLeavesASessionWithARequestUnderWay(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	h := hs.Config.Handler
	a := startSession(ctx, t, hs.URL)
	// Between the server's taking of a's request and the SDK's, another client
	// starts a session, through the same handler: the cap has run once it
	// returns.
	var once sync.Once
	s.admitted = func(r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") != a || !bytes.Contains(peekBody(r), []byte(`"tools/list"`)) {
			return
		}
		once.Do(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, initializeRequest(ctx, hs.URL))
			if rec.Code != http.StatusOK {
				t.Errorf("the second session's initialize: %d %s", rec.Code, rec.Body)
			}
		})
	}
	listToolsIn(ctx, t, hs.URL, a, "the request under way as the cap ran")
}

// A request in a session the cap is closing (the SDK still lists it) waits for
// the close and resumes the session. Handed to the SDK, it was taken in the
// closing session and cut. A notification waits too: let through, it resumed the
// session while the close still ran, whose end then forgot the resumed
// session's entry in the SDK's handler. And a request is known as the SDK reads
// it: a key repeated in another case ("METHOD", "ID") made it a notification or
// an answer to encoding/json, let through as such, and served by the SDK as a
// call.
func TestServerHTTPRequestInASessionTheCapClosesIsResumed(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"request", listTools, `"result"`},
		{"method repeated in capitals", `{"jsonrpc":"2.0","id":2,"method":"tools/list","METHOD":""}`, `"result"`},
		{"id repeated in capitals", `{"jsonrpc":"2.0","id":2,"method":"tools/list","ID":null}`, `"result"`},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { testRequestInASessionTheCapCloses(t, tc.body, tc.want) })
	}
}

// testRequestInASessionTheCapCloses posts body in a session as the cap is about
// to close it, and checks that it waited for the close and was answered (want
// in the answer; "" for 202 Accepted) in the session resumed.
func testRequestInASessionTheCapCloses(t *testing.T, body, want string) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := startSession(ctx, t, hs.URL)
	waiting := notifyWaitingClose(s)
	type answer struct {
		status int
		body   string
		err    error
	}
	listed := make(chan answer, 1)
	var closing func(id string)
	// As the cap is about to close a's session, a sends a request in it (whose
	// resumption then closes b's: the cap runs again).
	var once sync.Once
	s.capClosing = func(id string) { once.Do(func() { closing(id) }) }
	closing = func(id string) {
		if id != a {
			t.Errorf("the cap closes %s, not a's session %s", id, a)
			return
		}
		go func() {
			status, body, err := postIn(ctx, hs.URL, a, body)
			listed <- answer{status, body, err}
		}()
		select {
		case id := <-waiting:
			if id != a {
				t.Errorf("a request in %s waits, not a's", id)
			}
		case got := <-listed:
			listed <- got
			t.Error("a request in a session the cap is closing was served in it")
		case <-ctx.Done():
			t.Error("a request in a session the cap is closing neither waited nor was answered")
		}
	}
	initializeOver(ctx, t, hs.URL)
	select {
	case got := <-listed:
		ok := got.status == http.StatusOK && strings.Contains(got.body, want)
		if want == "" {
			ok = got.status == http.StatusAccepted
		}
		if got.err != nil || !ok {
			t.Fatalf("the request in the session the cap closed: %d %q %v", got.status, got.body, got.err)
		}
	case <-ctx.Done():
		t.Fatal("no answer to the request in the session the cap closed")
	}
	if !s.known(a) {
		t.Fatal("a's session was not resumed")
	}
}

// A session the cap closed and its client resumed counts toward MaxSessions
// like any other. The cap kept the closed session's ID apart until the SDK no
// longer listed it, and left the resumed session of that ID, listed before, out
// of the count for as long as it lived: never closed, nor the one it should have
// closed.
func TestServerHTTPResumedSessionIsCapped(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := startSession(ctx, t, hs.URL)
	b := initializeOver(ctx, t, hs.URL)
	if s.known(a) {
		t.Fatal("the cap left a's session open")
	}
	// a's request resumes its session, which closes b's, now idle the longest,
	// before the request is answered.
	listToolsIn(ctx, t, hs.URL, a, "a's request")
	if got := s.liveSessions(); got != 1 || !s.known(a) || s.known(b) {
		t.Fatalf("the server holds %d sessions, a's known %v, b's known %v; want a's alone", got, s.known(a), s.known(b))
	}
}

// A client's answer to a request of the server's, in a session the cap is
// about to close, is delivered: the session's Close waits for the server's
// calls under way, and an answer that waited for the close held it until the
// call's timeout (half a keepalive interval, 30 s by default), and every request
// in the session with it. The cap leaves a session whose client holds its
// stream: here the client got the server's ping on its stream, which then
// dropped, and answers as the cap closes the session.
func TestServerHTTPAnswerInASessionTheCapClosesIsDelivered(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := startSession(ctx, t, hs.URL)
	var ss *sdk.ServerSession
	for got := range s.srv.Sessions() {
		if got.ID() == a {
			ss = got
		}
	}
	if ss == nil {
		t.Fatal("a's session is not listed")
	}
	streamCtx, dropStream := context.WithCancel(ctx)
	stream := openStream(streamCtx, t, hs.URL, a)
	pingCtx, stopPing := context.WithCancel(ctx)
	defer stopPing()
	pinged := make(chan error, 1)
	go func() { pinged <- ss.Ping(pingCtx, nil) }()
	ping := readRequest(t, stream, "ping")
	dropStream()
	stream.Body.Close()
	waitStreams(t, s, a, 0)

	waiting := notifyWaitingClose(s)
	// As the cap is about to close a's session, a's client answers the ping.
	var once sync.Once
	var ran atomic.Bool
	s.capClosing = func(id string) {
		if id != a {
			return
		}
		once.Do(func() {
			ran.Store(true)
			answered := make(chan string, 1)
			go func() {
				status, body, err := postIn(ctx, hs.URL, a, `{"jsonrpc":"2.0","id":`+string(ping)+`,"result":{}}`)
				answered <- fmt.Sprint(status, " ", body, " ", err)
			}()
			select {
			case err := <-pinged:
				if err != nil {
					t.Errorf("the server's ping: %v", err)
				}
				if got := <-answered; got != "202  <nil>" {
					t.Errorf("the answer to the server's ping: %s", got)
				}
			case <-waiting:
				t.Error("the answer to the server's ping waits for the close, which waits for the answer")
				stopPing() // the close goes on once the ping gave up
			case <-ctx.Done():
				t.Error("no answer to the server's ping")
			}
		})
	}
	initializeOver(ctx, t, hs.URL) // returns once the cap closed a's session
	if !ran.Load() {
		t.Fatal("the cap did not close a's session")
	}
}

// openStream opens the stream (GET) of session id at url, and returns it once
// its headers came.
func openStream(ctx context.Context, t *testing.T, url, id string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("the stream of session %s: %s", id, resp.Status)
	}
	return resp
}

// readRequest reads stream up to the server's request of method, and returns
// its ID.
func readRequest(t *testing.T, stream *http.Response, method string) json.RawMessage {
	t.Helper()
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &msg) == nil && msg.Method == method && msg.ID != nil {
			return msg.ID
		}
	}
	t.Fatalf("the stream ended before a %s request: %v", method, sc.Err())
	return nil
}

// waitStreams waits until the server serves n streams (GETs) in session id, or
// in all sessions when id is "".
func waitStreams(t *testing.T, s *Server, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.use.mu.Lock()
		got := s.use.streams[id]
		if id == "" {
			got = 0
			for _, c := range s.use.streams {
				got += c
			}
		}
		s.use.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server serves %d streams in session %q, want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// listTools is a tools/list request.
const listTools = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

// initializeRequest is the request of initializeOver.
func initializeRequest(ctx context.Context, url string) *http.Request {
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"loop","version":"1"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	return req
}

// startSession starts a session at url as a client does, an initialize and
// then the initialized notification, and returns its ID once the server's
// handler returned from both.
func startSession(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	id := initializeOver(ctx, t, url)
	if status, body, err := postIn(ctx, url, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %q %v", status, body, err)
	}
	return id
}

// postIn posts body in session id at url (protocol 2025-06-18), and returns the
// answer, read to its end.
func postIn(ctx context.Context, url, id, body string) (status int, answer string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got), err
}

// Answers to the server's requests, in a session the cap is closing and that
// the SDK no longer holds, are taken and dropped (nothing awaits them any
// more), without resuming the session: a resumption then ran alongside the
// close's end, whose forgetting of the session's ID in the SDK's handler took
// the resumed session's entry.
func TestServerHTTPAnswerInASessionTheCapClosedDoesNotResumeIt(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := startSession(ctx, t, hs.URL)
	var once sync.Once
	var ran atomic.Bool
	s.capClosed = func(id string) {
		if id != a {
			return
		}
		once.Do(func() {
			ran.Store(true)
			status, body, err := postIn(ctx, hs.URL, a, `{"jsonrpc":"2.0","id":7,"result":{}}`)
			if err != nil || status != http.StatusAccepted {
				t.Errorf("an answer in the session closed: %d %q %v", status, body, err)
			}
			if s.known(a) {
				t.Error("an answer resumed the session while the cap's close of it ran")
			}
		})
	}
	initializeOver(ctx, t, hs.URL)
	if !ran.Load() {
		t.Fatal("the cap did not close a's session")
	}
	// The client's next request resumes the session.
	listToolsIn(ctx, t, hs.URL, a, "a's request after the close")
}

// Clients that hold a stream (the official SDKs' standalone GET), more of them
// than MaxSessions, idle: a session closed (here by a restart of its own)
// whose client opens its stream again is resumed, and the cap the resumption
// runs closes no session whose client holds a stream. It did: the closed
// session's client opened its stream again, which resumed the session and
// closed the next, whose client opened its stream again, and so on without end.
func TestServerHTTPStreamsReopenedDoNotChurnTheCap(t *testing.T) {
	const delay = 10 * time.Millisecond // the clients' wait before they reopen a stream
	resumed := make(chan struct{}, 100)
	log := slog.New(onMessage{"mcp server: session resumed", func() {
		select {
		case resumed <- struct{}{}:
		default:
		}
	}})
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 2, ReconnectDelay: delay, Logger: log})
	var closed atomic.Int64
	s.capClosing = func(string) { closed.Add(1) }
	var first string
	for i := range 3 {
		cs := connectClient(ctx, t, hs.URL, fmt.Sprint("idle", i))
		if i == 0 {
			first = cs.ID()
		}
		waitStreams(t, s, cs.ID(), 1)
	}
	// The first session ends, as in a restart: its client opens its stream
	// again, which resumes it and runs the cap, over MaxSessions.
	for ss := range s.srv.Sessions() {
		if ss.ID() == first {
			_ = ss.Close()
		}
	}
	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatal("the session closed was not resumed by its client's stream")
	}
	waitStreams(t, s, "", 3)
	time.Sleep(50 * delay) // time for a few rounds of closes and streams opened again
	if got := closed.Load(); got != 0 {
		t.Errorf("the cap closed %d sessions whose clients hold a stream", got)
	}
}

// Sessions whose clients hold a stream are not closed by the cap however many
// sessions start: the Go SDK's client fails for good once it opened its stream
// again six times with no event between, and every initialize closed such a
// session, idle the longest.
func TestServerHTTPCapLeavesASessionWithAStreamHeld(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := connectClient(ctx, t, hs.URL, "a")
	waitStreams(t, s, a.ID(), 1)
	var closedA, closed atomic.Int64
	s.capClosing = func(id string) {
		closed.Add(1)
		if id == a.ID() {
			closedA.Add(1)
		}
	}
	for range 8 {
		initializeOver(ctx, t, hs.URL)
	}
	if got := closedA.Load(); got != 0 {
		t.Errorf("the cap closed the session of a client holding its stream %d times", got)
	}
	// Each initialize closes the session before it; the last one, past
	// MaxSessions beside a's once its initialize is answered, may be closed too
	// by a cap that runs after it (as under load, when a session's end reruns it).
	if got := closed.Load(); got < 7 || got > 8 {
		t.Errorf("the cap closed %d of the 8 sessions started, want 7 (or 8)", got)
	}
	if _, err := a.ListTools(ctx, nil); err != nil {
		t.Fatalf("the client holding its stream: %v", err)
	}
}

// GETs in session IDs made up (of the shape of the server's), each hung up as
// soon as answered, are capped like other sessions: each resumes a session
// the SDK then holds for SessionTimeout, and a GET ran no cap, so that they
// grew the server's sessions without bound.
func TestServerHTTPStreamsInMadeUpSessionsAreCapped(t *testing.T) {
	const max = 2
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: max})
	get := func() {
		getCtx, hangUp := context.WithCancel(ctx)
		stream := openStream(getCtx, t, hs.URL, rand.Text())
		hangUp()
		stream.Body.Close()
	}
	for range 30 {
		get()
	}
	// Once their streams ended, the cap of one more leaves MaxSessions and its
	// own, whose stream is held as the cap runs.
	waitStreams(t, s, "", 0)
	get()
	if got := s.liveSessions(); got > max+1 {
		t.Fatalf("after 31 streams in sessions made up, the server holds %d sessions, MaxSessions %d", got, max)
	}
}

// An answer (to a request of the server's) in a session the cap is closing,
// which the server still lists as it takes it but the SDK forgets before its
// handler looks the session up, is taken (202): the SDK answers 404, on which
// the Go SDK's client fails for good, and nothing waits for an answer in a
// closed session.
func TestServerHTTPAnswerInASessionGoneIsTaken(t *testing.T) {
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: 1})
	a := startSession(ctx, t, hs.URL)
	admitted := make(chan struct{})
	closed := make(chan struct{})
	var onceAdmitted, onceClosing, onceClosed sync.Once
	// The answer, found in a known session, goes to the SDK's handler once the
	// close of the session returned.
	s.admitted = func(r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == a && onlyAnswers(peekBody(r)) {
			onceAdmitted.Do(func() { close(admitted) })
			<-closed
		}
	}
	answered := make(chan string, 1)
	s.capClosing = func(id string) {
		if id != a {
			return
		}
		onceClosing.Do(func() {
			go func() {
				status, body, err := postIn(ctx, hs.URL, a, `{"jsonrpc":"2.0","id":7,"result":{}}`)
				answered <- fmt.Sprintf("%d %q %v", status, body, err)
			}()
			<-admitted
		})
	}
	s.capClosed = func(id string) {
		if id == a {
			onceClosed.Do(func() { close(closed) })
		}
	}
	initializeOver(ctx, t, hs.URL)
	if got := <-answered; got != `202 "" <nil>` {
		t.Fatalf("an answer in a session gone: %s, want 202", got)
	}
}

// onMessage is a slog.Handler that calls f on each record of message msg.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// Streams held at once in many sessions made up keep them from the cap while held;
// once they all hung up, the server holds MaxSessions sessions and the last one
// whose stream ended, not every one of them until a session starts or resumes (or
// for session_timeout).
func TestServerHTTPStreamsHeldThenEndedLeaveTheCap(t *testing.T) {
	const max = 2
	s, hs, ctx := capServer(t, ServerOptions{MaxSessions: max})
	const held = 20
	getCtx, hangUp := context.WithCancel(ctx)
	var streams []*http.Response
	for range held {
		streams = append(streams, openStream(getCtx, t, hs.URL, rand.Text()))
	}
	if got := s.liveSessions(); got < held {
		t.Fatalf("%d sessions with a stream held, want %d: none of them may be closed", got, held)
	}
	hangUp()
	for _, r := range streams {
		r.Body.Close()
	}
	waitStreams(t, s, "", 0)
	// The last stream's end caps the sessions as its handler returns: looked at
	// until then.
	waitSessionsAtMost(t, s, max+1, func(got int) {
		t.Fatalf("after %d streams held then ended, the server holds %d sessions, MaxSessions %d", held, got, max)
	})
}
