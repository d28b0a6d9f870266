package node_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node keeps at most MaxLiveSessions idle session actors, whatever its idle
// timeout, and says so on /metrics; its effect answers are counted there too.
func TestNodeBoundsLiveSessions(t *testing.T) {
	n := nodetest.Start(t, node.Config{MaxLiveSessions: 2, IdleTimeout: time.Hour})
	const sessions = 6
	for i := range sessions {
		nodetest.Run(t, n, fmt.Sprintf("bounded-%d", i), "echo hi")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, evicted := metric(t, n, "troupe_sessions_live"), metric(t, n, "troupe_sessions_evicted_total")
		if live <= 2 && evicted >= sessions-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %v session actors live, %v evicted; want at most 2 live", live, evicted)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "\ntroupe_sessions_over_limit_total ") {
		t.Error("/metrics lacks troupe_sessions_over_limit_total")
	}
	if kept := metric(t, n, "troupe_effects_answers_kept"); kept < sessions {
		t.Errorf("troupe_effects_answers_kept = %d, want at least one answer per session", kept)
	}
	// An evicted session comes back with its history.
	events := nodetest.Run(t, n, "bounded-0", "echo again")
	if len(events) != 8 {
		t.Fatalf("bounded-0 has %d events after its second task, want 8", len(events))
	}
}

func TestNodeRefusesNegativeMaxLiveSessions(t *testing.T) {
	_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), MaxLiveSessions: -1})
	if err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("MaxLiveSessions -1: %v, want an error", err)
	}
}
