// Package ssekeepalive keeps a Server-Sent Events response alive while it has
// nothing to say: it writes an SSE comment line (": keep-alive", with no blank
// line after it: no event), which clients ignore, on a text/event-stream response that has been silent for a while, so
// that a client's read timeout, or a proxy's that cuts silent responses (nginx's
// proxy_read_timeout, a load balancer's idle timeout), does not end it. The A2A
// server's streams and the MCP server's streams of notifications use it.
package ssekeepalive

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// writer writes an SSE comment on a text/event-stream response that has
// been silent for a while, between events only: a comment goes out when every
// byte written so far was flushed (the SSE writers of the A2A and MCP SDKs, and
// Troupe's own, write an event and then flush it).
type writer struct {
	http.ResponseWriter
	every time.Duration

	mu      sync.Mutex
	stream  bool // the response is a text/event-stream whose header went out
	dirty   bool // bytes written since the last flush: in the middle of an event
	written bool // bytes written since the last tick
	done    chan struct{}
	wg      sync.WaitGroup
}

// Wrap returns w, wrapped to keep its stream alive with a comment whenever it
// was silent for every, and a function to call when the handler returned (no
// comment is written after it).
func Wrap(w http.ResponseWriter, every time.Duration) (http.ResponseWriter, func()) {
	k := &writer{ResponseWriter: w, every: every, done: make(chan struct{})}
	return k, func() {
		close(k.done)
		k.wg.Wait()
	}
}

func (k *writer) WriteHeader(status int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ResponseWriter.WriteHeader(status)
	k.start(status)
}

func (k *writer) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.start(http.StatusOK)
	k.dirty, k.written = true, true
	return k.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (k *writer) Flush() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dirty = false
	if f, ok := k.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (k *writer) Unwrap() http.ResponseWriter { return k.ResponseWriter }

// start begins the ticks once the header of a successful event stream is out
// (k.mu held).
func (k *writer) start(status int) {
	if k.stream || status != http.StatusOK || !strings.HasPrefix(k.Header().Get("Content-Type"), "text/event-stream") {
		return
	}
	k.stream = true
	k.wg.Add(1)
	go k.run()
}

func (k *writer) run() {
	defer k.wg.Done()
	// Ticks at half the interval: a comment goes out after a whole tick without
	// a write, so a stream is silent for at most every (ticking at every, it was
	// silent for up to twice as long when its last write came just after a tick).
	t := time.NewTicker(max(k.every/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-k.done:
			return
		case <-t.C:
			if !k.tick() {
				return
			}
		}
	}
}

// tick writes a comment when nothing was written since the last tick and no
// event is half written; false: the connection is gone.
func (k *writer) tick() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.written || k.dirty {
		k.written = false
		return true
	}
	// A comment line alone, without the blank line that ends an event: a blank
	// line dispatches an event to a parser that keeps the last event's id, as
	// the SSE specification says (httpx-sse), one with no data, which the A2A
	// Python SDK 0.3's resubscribe failed on.
	if _, err := k.ResponseWriter.Write([]byte(": keep-alive\n")); err != nil {
		return false
	}
	if f, ok := k.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	return true
}
