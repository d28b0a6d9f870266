package a2a

import (
	"net/http"
	"time"
)

// DefaultWriteTimeout bounds each write of an answer (ServerConfig.WriteTimeout).
const DefaultWriteTimeout = 30 * time.Second

// deadlineWriter gives each write and flush of a response its own write deadline,
// timeout from its start. An answer may take as long as its task (a blocking
// message/send, a stream), so the server's write timeout cannot bound it; but a
// client that stops reading (its receive window full) must not hold the handler,
// its goroutines and the connection for good, nor the task's other subscribers,
// whom the SDK's event broker hands each event only after this one took it. A
// write that stalls past the deadline fails, net/http then cancels the request's
// context, and the stream ends.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// withWriteDeadlines returns w with a deadline set before each write, and a
// function that sets one for what net/http writes after the handler returns (the
// end of a chunked body).
func withWriteDeadlines(w http.ResponseWriter, timeout time.Duration) (http.ResponseWriter, func()) {
	d := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
	// No deadline while the answer waits for its first byte.
	_ = d.rc.SetWriteDeadline(time.Time{})
	return d, d.extend
}

func (d *deadlineWriter) extend() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) WriteHeader(status int) {
	d.extend()
	d.ResponseWriter.WriteHeader(status)
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.extend()
	return d.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (d *deadlineWriter) Flush() {
	d.extend()
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
