package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/redact"
)

// TestHTTPServerErrorsGoToTheNodesLog: what net/http reports on its own (a
// handler's panic with its value and stack, an accept error it retries, a
// response written twice) goes to the node's logger, through its redacting
// handler, as one quoted record, not to the standard log on the process's stderr.
func TestHTTPServerErrorsGoToTheNodesLog(t *testing.T) {
	const secret = "sk-live-httpErrorLogSecret0987"
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(redact.NewHandler(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil), redact.New(secret)))
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv := n.HTTPServer()
	if srv.srv.ErrorLog == nil {
		t.Fatal("the HTTP server has no ErrorLog: net/http writes to the standard log, on stderr")
	}
	srv.srv.ErrorLog.Printf("http: panic serving 127.0.0.1:1234: token %s\n\x1b[31mgoroutine 7 [running]:", secret)
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	var lines []string
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, "panic serving") || strings.Contains(l, "goroutine 7") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "goroutine 7") || strings.Contains(got, secret) || strings.Contains(got, "\x1b") {
		t.Fatalf("net/http's report is not one redacted, quoted record of the node's log: %q", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
