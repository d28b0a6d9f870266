package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// unwritableLog is an event log whose health (eventlog.Health) says that its
// writes fail while failing is set, as ClickHouse's does while the server is
// down: the node's readiness and its ingress ask it.
type unwritableLog struct {
	eventlog.Log
	failing atomic.Bool
}

func (l *unwritableLog) Writable(context.Context) error {
	if l.failing.Load() {
		return errors.New("eventlog/clickhouse: dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return nil
}

var _ eventlog.Health = (*unwritableLog)(nil)

func newUnwritableLog(t *testing.T) *unwritableLog {
	t.Helper()
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	return &unwritableLog{Log: base}
}

// healthBody GETs /healthz from h and returns its status code and body fields.
func healthBody(t *testing.T, h http.Handler) (int, map[string]string) {
	t.Helper()
	code, body := getPath(h, "/healthz")
	var out map[string]string
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("/healthz: %d %q: %v", code, body, err)
	}
	return code, out
}

// TestHealthzFollowsWhatPostDoesWhileTheLogCannotWrite: while the event log
// cannot write (ClickHouse down), a node on Kafka still takes tasks (POST
// /v1/tasks 202: they wait on Kafka until the log writes again), so its
// /healthz stays 200, saying that it is degraded and why, with
// troupe_node_degraded 1; an embedded node refuses them (503), and its /healthz
// says 503 too. Before, the node on Kafka answered 503 at /healthz while it
// took every task, and since the nodes of a cluster share the log, a load
// balancer took them all out of rotation at once.
func TestHealthzFollowsWhatPostDoesWhileTheLogCannotWrite(t *testing.T) {
	t.Run("kafka", func(t *testing.T) {
		l := newUnwritableLog(t)
		n := newKafkaEnv(t).nodeWith(t, node.Config{Log: l})
		srv := httptest.NewServer(n.Handler())
		t.Cleanup(srv.Close)
		if code, body := healthBody(t, n.Handler()); code != http.StatusOK || body["status"] != "ok" {
			t.Fatalf("/healthz before the outage: %d %v", code, body)
		}
		l.failing.Store(true)
		code, body := healthBody(t, n.Handler())
		if code != http.StatusOK || body["status"] != "degraded" || !strings.Contains(body["reason"], "the event log cannot write") ||
			!strings.Contains(body["reason"], "connection refused") {
			t.Errorf("/healthz on Kafka while the log cannot write: %d %v; want 200, degraded, saying why", code, body)
		}
		if v := metric(t, n, "troupe_node_degraded"); v != 1 {
			t.Errorf("troupe_node_degraded while the log cannot write: %d, want 1", v)
		}
		if code, body, err := postTask(srv.URL, `{"input":"during","session_id":"during"}`); err != nil || code != http.StatusAccepted {
			t.Errorf("POST /v1/tasks on Kafka while the log cannot write: %d %s %v; want 202, as /healthz says", code, body, err)
		}
		l.failing.Store(false)
		waitFor(t, 10*time.Second, "/healthz to say ok once the log writes", func() bool {
			code, body := healthBody(t, n.Handler())
			return code == http.StatusOK && body["status"] == "ok"
		})
		if v := metric(t, n, "troupe_node_degraded"); v != 0 {
			t.Errorf("troupe_node_degraded once the log writes: %d, want 0", v)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		l := newUnwritableLog(t)
		n := nodetest.Start(t, node.Config{Log: l})
		srv := httptest.NewServer(n.Handler())
		t.Cleanup(srv.Close)
		l.failing.Store(true)
		if code, body := healthBody(t, n.Handler()); code != http.StatusServiceUnavailable || !strings.Contains(body["reason"], "the event log cannot write") {
			t.Errorf("/healthz embedded while the log cannot write: %d %v; want 503", code, body)
		}
		if code, body, err := postTask(srv.URL, `{"input":"during","session_id":"during"}`); err != nil || code != http.StatusServiceUnavailable {
			t.Errorf("POST /v1/tasks embedded while the log cannot write: %d %s %v; want 503, as /healthz says", code, body, err)
		}
	})
}
