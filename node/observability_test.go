package node_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// /metrics carries the Go runtime and process collectors next to the node's own.
func TestMetricsHaveGoRuntimeAndProcessCollectors(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"\ngo_goroutines ", "\nprocess_resident_memory_bytes ", "\ngo_memstats_heap_alloc_bytes ", "\nprocess_open_fds "} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("/metrics has no %s", strings.TrimSpace(name))
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the node's goroutines to log into.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A finished task's result goes to troupe.results, which nobody subscribes to on an
// embedded node; the bus must not log that for every task. It publishes nothing to
// a topic without subscribers, so the record is absent at every level.
func TestFinishedTasksDoNotLogNoSubscribersAtInfo(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		n, stop := nodetest.StartWithStop(t, node.Config{DataDir: t.TempDir(), Logger: logger})
		for i := range 3 {
			nodetest.Run(t, n, "quiet-"+strconv.Itoa(i), "echo done")
		}
		stop() // the outbox has published every result when the node is closed
		if out := buf.String(); strings.Contains(out, "No subscribers") {
			t.Fatalf("at %s the log has:\n%s", level, out)
		}
	}
}
