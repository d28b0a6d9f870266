package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// hangingLog is an event log whose health probe (eventlog.Health) hangs while
// hung is set, whatever its ctx says, until release is closed: a dependency whose
// client ignores the probe's deadline, as clickhouse-go's handshake did on a
// server that accepted connections and never answered. It counts the probes
// made and the most under way at once.
type hangingLog struct {
	eventlog.Log
	hung    atomic.Bool
	release chan struct{}

	calls, inFlight, maxInFlight atomic.Int64
}

func (l *hangingLog) Writable(ctx context.Context) error {
	l.calls.Add(1)
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for {
		m := l.maxInFlight.Load()
		if n <= m || l.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	if l.hung.Load() {
		<-l.release
	}
	return nil
}

var _ eventlog.Health = (*hangingLog)(nil)

// checkHealth GETs path with a client that gives up after 5 s, ten times the
// bound of a health check, and returns the status and the reason given.
func checkHealth(t *testing.T, url, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: %d %q: %v", path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, out["reason"]
}

// TestHealthzAnswersWhileTheLogHangs: while the event log's health probe hangs
// (and ignores its deadline), /healthz answers 503 with a reason naming the
// event log and saying that it did not answer, while the probe still hangs;
// checks made meanwhile, one after another and many at once, share the one
// probe under way instead of each starting its own; /livez stays 200 (a
// restart does not cure a log that hangs); and once the log answers again,
// /healthz is 200. Before, /healthz waited as long as the probe did: here
// forever, on ClickHouse 5 s (clickhouse-go's dial timeout), past the second a
// Kubernetes probe waits, which then failed with no reason given.
func TestHealthzAnswersWhileTheLogHangs(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	l := &hangingLog{Log: base, release: make(chan struct{})}
	var once sync.Once
	unhang := func() { once.Do(func() { l.hung.Store(false); close(l.release) }) }
	n := nodetest.Start(t, node.Config{Log: l})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(unhang) // first: the server's Close waits for its handlers

	if code, reason := checkHealth(t, srv.URL, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before the log hangs: %d %s", code, reason)
	}
	l.hung.Store(true)
	before := l.calls.Load()
	for i := range 5 {
		code, reason := checkHealth(t, srv.URL, "/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(reason, "the event log (") || !strings.Contains(reason, "did not answer a probe within") {
			t.Fatalf("/healthz %d while the log hangs: %d %q; want 503 saying that the event log did not answer", i, code, reason)
		}
		if code, reason := checkHealth(t, srv.URL, "/livez"); code != http.StatusOK {
			t.Fatalf("/livez while the log hangs: %d %s; want 200: a restart does not cure a log that hangs", code, reason)
		}
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, reason := checkHealth(t, srv.URL, "/healthz"); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz among 20 at once while the log hangs: %d %s; want 503", code, reason)
			}
		}()
	}
	wg.Wait()
	if c, m := l.calls.Load()-before, l.maxInFlight.Load(); c != 1 || m != 1 {
		t.Errorf("25 checks while the log hangs made %d probes, at most %d at once; want 1: the checks share the probe under way", c, m)
	}

	unhang()
	if code, reason := checkHealth(t, srv.URL, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz once the log answers again: %d %s", code, reason)
	}
	if m := l.maxInFlight.Load(); m != 1 {
		t.Errorf("at most %d probes at once, want 1", m)
	}
}
