package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// writersKept counts the requests the server notes as writing a stream.
func (s *Server) writersKept() int {
	n := 0
	s.writers.Range(func(any, any) bool { n++; return true })
	return n
}

// The note of which request writes each stream lasts while the request does: a
// request in a session the server resumes (a restart, another node's session, an
// ID a client made up) opened the resumed session's streams (its stream of
// notifications, its initialize's) under its own name, and only the last of them
// was forgotten when it ended, so that every session resumed grew the server's
// memory for good.
func TestServerHTTPStreamWritersForgottenWithTheirRequests(t *testing.T) {
	s := NewServer(&echoNode{}, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(id, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("answered %s", resp.Status)
		}
	}
	id := rand.Text()
	for i := range 1000 {
		send(id, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+1)+`,"method":"tools/list"}`)
	}
	for range 30 {
		send(rand.Text(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	}
	if n := s.writersKept(); n != 0 {
		t.Fatalf("%d streams still noted as written once every request ended", n)
	}
}

// stuckWriter is the response of a connection that died unseen: once stuck, a
// write blocks until its write deadline passes, as one into a dead connection's
// full buffers does.
type stuckWriter struct {
	header http.Header
	mu     sync.Mutex
	body   bytes.Buffer
	stuck  bool
	moved  chan struct{} // signalled at each change of the deadline
	dl     time.Time
	inside chan struct{} // closed once a write is stuck
	once   sync.Once
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Flush()              {}

func (w *stuckWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	w.dl = t
	w.mu.Unlock()
	select {
	case w.moved <- struct{}{}:
	default:
	}
	return nil
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if !w.stuck {
		defer w.mu.Unlock()
		return w.body.Write(p)
	}
	w.mu.Unlock()
	w.once.Do(func() { close(w.inside) })
	for {
		w.mu.Lock()
		dl := w.dl
		w.mu.Unlock()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		wait := time.Second
		if !dl.IsZero() {
			wait = min(wait, time.Until(dl))
		}
		select {
		case <-w.moved:
		case <-time.After(wait):
		}
	}
}

func (w *stuckWriter) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// heldNode's tool answers "opened" once the test releases it.
type heldNode struct {
	echoNode
	started, release chan struct{}
}

func (h *heldNode) CallTool(ctx context.Context, _, _, _ string) (string, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
		return "opened", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// A resumption takes over a stream whose request is stuck writing into a dead
// connection (the answer, or a notification, into full buffers): the request's
// write is ended at once, and the resumption replays the answer. The request
// ended only when its write failed, after ServerOptions.WriteTimeout (30 s by
// default), so that the resumption waited takeoverWait for nothing and then
// waited on the SDK's stream, which the stuck write held, and was answered 409
// Conflict.
func TestServerHTTPResumptionEndsAStuckWrite(t *testing.T) {
	c := &heldNode{started: make(chan struct{}, 1), release: make(chan struct{})}
	s := NewServer(c, ServerOptions{WriteTimeout: 15 * time.Second})
	h := s.Handler()
	hs := httptest.NewServer(h)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := rand.Text()
	if status, _, err := postIn(ctx, hs.URL, id, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); err != nil || status != http.StatusOK {
		t.Fatalf("the session's first request answered %d, %v", status, err)
	}
	w := &stuckWriter{header: http.Header{}, moved: make(chan struct{}, 1), inside: make(chan struct{})}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(w, req)
	}()
	select {
	case <-c.started:
	case <-served:
		t.Fatalf("the call was answered before it started: %q", w.text())
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	var last string
	for _, line := range strings.Split(w.text(), "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			last = v
		}
	}
	if last == "" {
		t.Fatalf("the call's stream carried no event ID: %q", w.text())
	}
	w.mu.Lock()
	w.stuck = true
	w.mu.Unlock()
	close(c.release)
	select {
	case <-w.inside:
	case <-ctx.Done():
		t.Fatal("the call's answer was never written")
	}
	// Well under takeoverWait: the stuck write is ended at once.
	gctx, gcancel := context.WithTimeout(ctx, takeoverWait-time.Second)
	defer gcancel()
	get, err := http.NewRequestWithContext(gctx, http.MethodGet, hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Session-Id", id)
	get.Header.Set("MCP-Protocol-Version", "2025-11-25")
	get.Header.Set("Last-Event-ID", last)
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatalf("the resumption was not answered: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":7`) || !strings.Contains(string(body), "opened") {
		t.Fatalf("the resumption answered %s (%v): %s", resp.Status, err, body)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("the request taken over was never served")
	}
}

// Of two resumptions of one stream at once, the later gets the stream, even
// when the request that writes it is slow to end: the earlier resumption,
// ended while it waited for that request, had nothing left to wait for, so the
// later one reached the SDK at once, while the stream was still held, and was
// answered 409 Conflict, as the earlier one was.
func TestServerHTTPLaterOfTwoResumptionsGetsTheStream(t *testing.T) {
	s := NewServer(&echoNode{}, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rand.Text()
	if status, _, err := postIn(ctx, hs.URL, id, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); err != nil || status != http.StatusOK {
		t.Fatalf("the session's first request answered %d, %v", status, err)
	}
	get := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		return http.DefaultClient.Do(req)
	}
	// The session's stream of notifications, held by a GET that does not end
	// when a resumption asks it to (slow: it ends when the test says so).
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	held, err := get(hctx)
	if err != nil || held.StatusCode != http.StatusOK {
		t.Fatalf("the first GET answered %v, %v", held, err)
	}
	defer held.Body.Close()
	k := streamKey{id, ""}
	v, _ := s.writers.Load(k)
	holder, _ := v.(*streamWriter)
	if holder == nil {
		t.Fatal("the first GET is not noted as the stream's writer")
	}
	slow := &streamWriter{cancel: func() {}, rc: http.NewResponseController(httptest.NewRecorder()), done: make(chan struct{}), owner: s, session: id}
	s.writers.Store(k, slow)
	writerAfter := func(w any) any {
		t.Helper()
		for {
			if v, _ := s.writers.Load(k); v != w {
				return v
			}
			select {
			case <-ctx.Done():
				t.Fatal("no GET took the stream over")
			case <-time.After(time.Millisecond):
			}
		}
	}
	type answer struct {
		status int
		err    error
	}
	ask := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := get(ctx)
			if err != nil {
				ch <- answer{0, err}
				return
			}
			status := resp.StatusCode
			if status == http.StatusOK {
				// Its first bytes: it has the stream.
				_, err = resp.Body.Read(make([]byte, 1))
			}
			resp.Body.Close()
			ch <- answer{status, err}
		}()
		return ch
	}
	first := ask()
	earlier := writerAfter(slow)
	second := ask()
	writerAfter(earlier)
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("the earlier resumption, taken over, was not answered")
	}
	select {
	case a := <-second:
		t.Fatalf("the later resumption was answered %d (%v) while the stream was still held", a.status, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	hcancel()
	select {
	case <-holder.done:
	case <-ctx.Done():
		t.Fatal("the first GET was not served")
	}
	close(slow.done)
	select {
	case a := <-second:
		if a.status != http.StatusOK || a.err != nil {
			t.Fatalf("the later resumption answered %d (%v), want the stream", a.status, a.err)
		}
	case <-ctx.Done():
		t.Fatal("the later resumption was not answered")
	}
}

// A GET the SDK refuses (an Accept without text/event-stream, a protocol
// version it does not speak: 400) takes no stream over: before, it ended the
// GET that held the session's stream of notifications, and got no stream
// either, so that a client's stray request, or anyone's who knew the session's
// ID on a server without tokens, cut the client's notifications.
func TestServerHTTPRefusedGETTakesNoStreamOver(t *testing.T) {
	s := NewServer(&echoNode{}, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rand.Text()
	if status, _, err := postIn(ctx, hs.URL, id, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); err != nil || status != http.StatusOK {
		t.Fatalf("the session's first request answered %d, %v", status, err)
	}
	get := func(ctx context.Context, header, value string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		if header != "" {
			req.Header.Set(header, value)
		}
		return http.DefaultClient.Do(req)
	}
	held, err := get(ctx, "", "")
	if err != nil || held.StatusCode != http.StatusOK {
		t.Fatalf("the first GET answered %v, %v", held, err)
	}
	defer held.Body.Close()
	k := streamKey{id, ""}
	v, _ := s.writers.Load(k)
	holder, _ := v.(*streamWriter)
	if holder == nil {
		t.Fatal("the first GET is not noted as the stream's writer")
	}
	for _, bad := range []struct{ header, value string }{
		{"Accept", "application/json"},
		{"MCP-Protocol-Version", "1999-01-01"},
	} {
		resp, err := get(ctx, bad.header, bad.value)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a GET with %s %q answered %s: %s, want 400", bad.header, bad.value, resp.Status, b)
		}
		if v, _ := s.writers.Load(k); v != holder || holder.takenOver() {
			t.Fatalf("a GET with %s %q, refused, took the stream of notifications over", bad.header, bad.value)
		}
		select {
		case <-holder.done:
			t.Fatalf("a GET with %s %q, refused, ended the GET that held the stream of notifications", bad.header, bad.value)
		default:
		}
	}
}

// A client that opens its stream of notifications again (GET, no Last-Event-ID)
// gets it, with what is kept of it, when the stream's first events were purged
// (the events kept are bounded for all sessions at once) or the stream was
// forgotten (a session keeps the events of its latest maxStreamsPerSession
// streams: its stream of notifications, its first, goes after as many
// requests). Before, the SDK, which replays such a GET the stream from its
// first event, answered 400 "failed to replay events", once the takeover had
// ended the GET that held the stream, and the client got no notifications
// again.
func TestServerHTTPStreamOfNotificationsOpenedAgainAfterItsEventsWentIsServed(t *testing.T) {
	s := NewServer(&echoNode{}, ServerOptions{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rand.Text()
	if status, _, err := postIn(ctx, hs.URL, id, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); err != nil || status != http.StatusOK {
		t.Fatalf("the session's first request answered %d, %v", status, err)
	}
	open := func(what string, want string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("the stream of notifications opened again %s answered %s: %s", what, resp.Status, b)
		}
		if want == "" {
			return
		}
		if got := readUntil(resp.Body, want); !strings.Contains(got, want) {
			t.Fatalf("the stream of notifications opened again %s replayed %q, want %q", what, got, want)
		}
	}
	// Two notifications, kept; the first purged.
	_ = s.events.Append(ctx, id, "", []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`))
	_ = s.events.Append(ctx, id, "", []byte(`{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}`))
	s.events.mu.Lock()
	for l := s.events.sessions[id].streams[""]; l.first == 0; {
		s.events.maxBytes = s.events.bytes - 1
		s.events.purge(0)
	}
	s.events.mu.Unlock()
	open("once its first event was purged", "id: _1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/prompts/list_changed\"}")
	for i := range maxStreamsPerSession {
		if status, _, err := postIn(ctx, hs.URL, id, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+2)+`,"method":"tools/list"}`); err != nil || status != http.StatusOK {
			t.Fatalf("request %d answered %d, %v", i+2, status, err)
		}
	}
	open("once it was forgotten", "")
}

// readUntil reads r until what it read holds want, or r ends, or 5 s pass.
func readUntil(r io.Reader, want string) string {
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for !strings.Contains(b.String(), want) {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.String()
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		return ""
	}
}
