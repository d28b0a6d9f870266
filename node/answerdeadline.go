package node

import (
	"net/http"
	"time"
)

// awaitAnswer is for a handler whose answer waits on an embedder or a model once
// the request is read (adding a document, searching a knowledge base or memories,
// an ask, writing memories): it extends w's write deadline, past the server's
// WriteTimeout, by wait (HTTPConfig.answerWait in tests), and returns w wrapped so
// that the deadline is armed again, for WriteTimeout, when the answer starts.
// Without that a wait that outlasted the extension (an ingestion of more than 10
// minutes) would be written to the log but answered with an empty reply: the
// deadline would have passed before the first byte.
func (n *Node) awaitAnswer(w http.ResponseWriter, wait time.Duration) http.ResponseWriter {
	if n.cfg.HTTP.answerWait > 0 {
		wait = n.cfg.HTTP.answerWait
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(wait))
	timeout := n.cfg.HTTP.WriteTimeout
	if timeout <= 0 {
		timeout = defaultWriteTimeout
	}
	return &answerWriter{ResponseWriter: w, rc: rc, timeout: timeout}
}

// answerWriter arms its write deadline once, for timeout, when its answer starts.
type answerWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	armed   bool
}

func (a *answerWriter) arm() {
	if !a.armed {
		a.armed = true
		_ = a.rc.SetWriteDeadline(time.Now().Add(a.timeout))
	}
}

func (a *answerWriter) WriteHeader(status int) {
	a.arm()
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerWriter) Write(p []byte) (int, error) {
	a.arm()
	return a.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the underlying writer.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
