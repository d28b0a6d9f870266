package node

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

func getHealth(t *testing.T, h http.Handler) (int, map[string]string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	out := map[string]string{}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("GET /healthz: %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return rec.Code, out
}

// /healthz says 503 with a reason once the session host is not running: such a
// node accepts HTTP requests but can run no task.
func TestHealthzReportsAStoppedSessionHost(t *testing.T) {
	n, err := New(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	start, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(start)
	t.Cleanup(stop)
	h := n.Handler()
	if code, out := getHealth(t, h); code != http.StatusOK || out["status"] != "ok" {
		t.Fatalf("healthy node: %d %v", code, out)
	}
	// The host stops for good, as when its supervisor gave up on it.
	if err := n.system.Root.StopFuture(n.host).Wait(); err != nil {
		t.Fatal(err)
	}
	code, out := getHealth(t, h)
	if code != http.StatusServiceUnavailable || out["status"] != "unhealthy" || !strings.Contains(out["reason"], "session host") {
		t.Fatalf("node without a session host: %d %v, want 503 naming the session host", code, out)
	}
	stop()
	if code, out := getHealth(t, h); code != http.StatusServiceUnavailable || out["reason"] == "" {
		t.Fatalf("closed node: %d %v, want 503 with a reason", code, out)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The repro of a node that broke on its first passivation: one task, then the idle
// timeout (Config.IdleTimeout) passes. The session passivates without a failure in
// the log, the node stays healthy, and the session takes its next task.
func TestNodeSurvivesPassivation(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), IdleTimeout: 20 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	start, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sync.OnceFunc(start))
	sessions := func() int {
		res, err := n.system.Root.RequestFuture(n.host, &actors.CountSessions{}, 5*time.Second).Result()
		if err != nil {
			t.Fatalf("the session host does not answer: %v", err)
		}
		return res.(int)
	}
	for round := range 2 {
		runTask(t, n, "idle", "echo round")
		deadline := time.Now().Add(10 * time.Second)
		for sessions() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the session never passivated", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if code, out := getHealth(t, n.Handler()); code != http.StatusOK {
			t.Fatalf("round %d: /healthz %d %v", round, code, out)
		}
	}
	for _, bad := range []string{"level=ERROR", "Recovering", "panic"} {
		if strings.Contains(logs.String(), bad) {
			t.Fatalf("the log says %q:\n%s", bad, logs.String())
		}
	}
}

// runTask submits a task and waits (at most 10 s) for its end on the live feed.
func runTask(t *testing.T, n *Node, sessionID, input string) {
	t.Helper()
	live, stop := n.Watch(sessionID)
	defer stop()
	if _, err := n.Submit(context.Background(), Task{Input: input, SessionID: sessionID}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-live:
			if !ok {
				t.Fatalf("session %s: the live feed closed", sessionID)
			}
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				return
			}
		case <-timeout:
			t.Fatalf("session %s: the task did not finish in 10 s", sessionID)
		}
	}
}
