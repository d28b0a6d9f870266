//go:build unix

package a2a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// floodBackend is a streamBackend whose answer is n deltas of size bytes each, then
// its end: a stream far larger than the socket buffers between server and client.
type floodBackend struct {
	*streamBackend
	size int
}

func (b *floodBackend) SubmitTask(_ context.Context, sub Submission) error {
	submitted := b.envelope(&messages.TaskSubmitted{Input: "flood"}, 1)
	submitted.ID, submitted.SessionID = sub.EnvelopeID, sub.SessionID
	requested := b.envelope(&messages.ModelRequested{Key: "call-1", Step: 1}, 2)
	requested.SessionID = sub.SessionID
	b.mu.Lock()
	b.log = append(b.log, submitted, requested)
	b.mu.Unlock()
	b.live <- submitted
	b.live <- requested
	piece := strings.Repeat("x", b.size)
	go func() {
		for i := range b.n {
			b.live <- b.envelope(&messages.ModelDelta{Key: "call-1", Step: 1, Seq: uint64(i + 1), Content: piece}, 0)
		}
		responded := b.envelope(&messages.ModelResponded{Key: "call-1", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, 3)
		completed := b.envelope(&messages.TaskCompleted{Output: "done", Steps: 1}, 4)
		responded.SessionID, completed.SessionID = sub.SessionID, sub.SessionID
		b.mu.Lock()
		b.log = append(b.log, responded, completed)
		b.mu.Unlock()
		b.live <- responded
		b.live <- completed
	}()
	return nil
}

// A client that sends message/stream and then reads nothing (its receive window
// shut) is dropped once a write of its stream stalls past the write timeout: the
// connection closes and the goroutines of its request end, where they and the
// connection used to stay for as long as the client kept the socket open.
func TestStreamToAClientThatNeverReadsIsDropped(t *testing.T) {
	b := &floodBackend{streamBackend: newStreamBackend(2000), size: 16 << 10}
	s, err := NewServer(b, ServerConfig{WriteTimeout: 200 * time.Millisecond}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	before := runtime.NumGoroutine()

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"flood"}]}}}`
	if _, err := fmt.Fprintf(conn, "POST /a2a HTTP/1.1\r\nHost: a2a\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	// The stream runs (its goroutines start), then stalls on the full window.
	deadline := time.Now().Add(30 * time.Second) // hang guards, not timing claims
	for runtime.NumGoroutine() <= before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the stream: it never started", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before a client stopped reading its stream: they stay\n%s",
				runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The server closed the connection: what it sent, then the end.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the dropped stream: %v after %d bytes; want its end", err, n)
	}
	if total := b.n * b.size; n >= int64(total) {
		t.Fatalf("the client got %d bytes, the whole stream (%d): it was not stalled", n, total)
	}
}
