package a2a

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultKeepAlive is how long a stream stays silent before the server writes an
// SSE comment (": keep-alive") on it. It is shorter than the 5 s the A2A Python
// SDK's HTTP client (httpx's default timeout) waits for the next byte of a stream:
// a model call or a tool that takes longer than that would end its stream.
const DefaultKeepAlive = 2 * time.Second

// keepAliveWriter writes an SSE comment on a text/event-stream response that has
// been silent for a while, between events only: a comment goes out when every
// byte written so far was flushed (the SDK's SSE writer, and v1Writer, write an
// event and then flush it).
type keepAliveWriter struct {
	http.ResponseWriter
	every time.Duration

	mu      sync.Mutex
	stream  bool // the response is a text/event-stream whose header went out
	dirty   bool // bytes written since the last flush: in the middle of an event
	written bool // bytes written since the last tick
	done    chan struct{}
	wg      sync.WaitGroup
}

// keepAlive returns w, wrapped to keep its stream alive, and a function to call
// when the handler returned (no comment is written after it).
func keepAlive(w http.ResponseWriter, every time.Duration) (http.ResponseWriter, func()) {
	k := &keepAliveWriter{ResponseWriter: w, every: every, done: make(chan struct{})}
	return k, func() {
		close(k.done)
		k.wg.Wait()
	}
}

func (k *keepAliveWriter) WriteHeader(status int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ResponseWriter.WriteHeader(status)
	k.start(status)
}

func (k *keepAliveWriter) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.start(http.StatusOK)
	k.dirty, k.written = true, true
	return k.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (k *keepAliveWriter) Flush() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dirty = false
	if f, ok := k.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (k *keepAliveWriter) Unwrap() http.ResponseWriter { return k.ResponseWriter }

// start begins the ticks once the header of a successful event stream is out
// (k.mu held).
func (k *keepAliveWriter) start(status int) {
	if k.stream || status != http.StatusOK || !strings.HasPrefix(k.Header().Get("Content-Type"), "text/event-stream") {
		return
	}
	k.stream = true
	k.wg.Add(1)
	go k.run()
}

func (k *keepAliveWriter) run() {
	defer k.wg.Done()
	t := time.NewTicker(k.every)
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
func (k *keepAliveWriter) tick() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.written || k.dirty {
		k.written = false
		return true
	}
	if _, err := k.ResponseWriter.Write([]byte(": keep-alive\n\n")); err != nil {
		return false
	}
	if f, ok := k.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	return true
}
