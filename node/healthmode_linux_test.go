package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
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

// TestHealthzFollowsKafka stops the broker under a node on Kafka: /healthz
// answers 503 within its half second, saying that the Kafka brokers cannot be
// reached, and naming them, as a POST /v1/tasks does (at once, from the same check:
// TestTaskRefusedAtOnceWhileTheBrokersAreKnownUnreachable), rather than "topic not found"; once the broker is back, 200. /livez stays 200: a
// restart does not bring Kafka back. Before, /healthz said ok throughout.
func TestHealthzFollowsKafka(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			kc.Close()
		}
	})
	addr := kc.ListenAddrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	n := kafkaEnv{brokers: []string{addr}, prefix: uniqueTopicPrefix(t)}.node(t)
	if code, body := healthBody(t, n.Handler()); code != http.StatusOK {
		t.Fatalf("/healthz with the broker up: %d %v", code, body)
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	if code, body, err := postTask(srv.URL, `{"input":"up","session_id":"up"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks with the broker up: %d %s %v", code, body, err)
	}

	kc.Close()
	stopped = true
	var body map[string]string
	waitFor(t, 10*time.Second, "/healthz to answer 503 with the broker down", func() bool {
		start := time.Now()
		var code int
		code, body = healthBody(t, n.Handler())
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("/healthz took %s", d)
		}
		return code == http.StatusServiceUnavailable
	})
	if want := fmt.Sprintf("the Kafka brokers at %s cannot be reached", addr); !strings.Contains(body["reason"], want) {
		t.Errorf("/healthz with the broker down: %v; want a reason saying %q", body, want)
	}
	if code, body := getPath(n.Handler(), "/livez"); code != http.StatusOK {
		t.Errorf("/livez with the broker down: %d %s; want 200", code, body)
	}
	if code, body, err := postTask(srv.URL, `{"input":"down","session_id":"down"}`); err != nil || code != http.StatusServiceUnavailable ||
		!strings.Contains(body, "the Kafka brokers at "+addr+" cannot be reached") || strings.Contains(body, "topic not found") {
		t.Errorf("POST /v1/tasks with the broker down: %d %s %v; want 503 saying that the brokers cannot be reached", code, body, err)
	}

	back, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatalf("restart kfake on port %d: %v", port, err)
	}
	t.Cleanup(back.Close)
	waitFor(t, 10*time.Second, "/healthz to answer 200 once the broker is back", func() bool {
		code, _ := healthBody(t, n.Handler())
		return code == http.StatusOK
	})
}

// TestLogOutageOnKafkaSaysTasksWait: the warning a node on Kafka logs as its
// event log's writes start failing says that new tasks wait on the bus, as they
// do (POST /v1/tasks 202), not that they are refused, as an embedded node's
// says. It said "new tasks are refused" on both.
func TestLogOutageOnKafkaSaysTasksWait(t *testing.T) {
	for _, kafka := range []bool{true, false} {
		logs := &syncBuf{}
		l := newUnwritableLog(t)
		cfg := node.Config{Log: l, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		var n *node.Node
		if kafka {
			n = newKafkaEnv(t).nodeWith(t, cfg)
		} else {
			n = nodetest.Start(t, cfg)
		}
		l.failing.Store(true)
		_, _ = getPath(n.Handler(), "/healthz")
		waitFor(t, 10*time.Second, "the outage's warning", func() bool { return strings.Contains(logs.String(), "event log writes fail") })
		want, not := "new tasks wait on the bus", "new tasks are refused"
		if !kafka {
			want, not = not, want
		}
		if out := logs.String(); !strings.Contains(out, want) || strings.Contains(out, not) {
			t.Errorf("kafka %v: the outage's warning: %s; want it to say %q", kafka, out, want)
		}
	}
}

// stoppedLog is an unwritableLog whose appends fail too while failing is set, as
// ClickHouse's do while the server is down.
type stoppedLog struct{ unwritableLog }

func (l *stoppedLog) Append(ctx context.Context, events []messages.Envelope) error {
	if l.failing.Load() {
		return l.Writable(ctx)
	}
	return l.Log.Append(ctx, events)
}

// TestDegradedFollowsTheLogWithoutProbes: on Kafka, troupe_node_degraded is 1
// while the event log's writes fail and 0 once they go through again, although
// nothing asks /healthz, as a Prometheus that scrapes a node no load balancer
// probes sees it. It was set by /healthz only, and said 0 throughout such an
// outage.
func TestDegradedFollowsTheLogWithoutProbes(t *testing.T) {
	l := &stoppedLog{unwritableLog: *newUnwritableLog(t)}
	n := newKafkaEnv(t).nodeWith(t, node.Config{Log: l})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	l.failing.Store(true)
	if code, body, err := postTask(srv.URL, `{"input":"during","session_id":"during"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks on Kafka while the log cannot write: %d %s %v; want 202", code, body, err)
	}
	waitFor(t, 20*time.Second, "the session's write to fail", func() bool { return metric(t, n, "troupe_eventlog_writes_failing") == 1 })
	if v := metric(t, n, "troupe_node_degraded"); v != 1 {
		t.Errorf("troupe_node_degraded while the log cannot write, /healthz unasked: %d, want 1", v)
	}
	l.failing.Store(false)
	waitFor(t, 20*time.Second, "the log's writes to go through", func() bool { return metric(t, n, "troupe_eventlog_writes_failing") == 0 })
	if v := metric(t, n, "troupe_node_degraded"); v != 0 {
		t.Errorf("troupe_node_degraded once the log writes, /healthz unasked: %d, want 0", v)
	}
}

// TestLargeTaskOnKafkaWhileTheLogCannotWrite: while the event log cannot write,
// a node on Kafka queues a task (202), but one larger than a bus message, which
// goes through the log, is refused (503) with a reason that says so: too large
// for the bus, stored in the event log, which cannot write, and that smaller
// tasks still queue. It said "store a message too large for the bus in
// bus/task/…", which a client cannot act on.
func TestLargeTaskOnKafkaWhileTheLogCannotWrite(t *testing.T) {
	l := &stoppedLog{unwritableLog: *newUnwritableLog(t)}
	n := newKafkaEnv(t).nodeWith(t, node.Config{Log: l})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	l.failing.Store(true)
	if code, body, err := postTask(srv.URL, `{"input":"small","session_id":"small"}`); err != nil || code != http.StatusAccepted {
		t.Errorf("POST /v1/tasks, a small task, while the log cannot write: %d %s %v; want 202", code, body, err)
	}
	big := strings.Repeat("x", messages.BusMessageMax+1)
	code, body, err := postTask(srv.URL, `{"input":"`+big+`","session_id":"big"}`)
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("POST /v1/tasks, a task larger than a bus message, while the log cannot write: %d %s %v; want 503", code, body, err)
	}
	for _, want := range []string{"larger than a bus message", "the event log cannot write", "smaller tasks", "connection refused"} {
		if !strings.Contains(body, want) {
			t.Errorf("the refusal of a task larger than a bus message: %s; want it to say %q", body, want)
		}
	}
}

// TestDegradedSaysLargeTasksAreRefused: while the event log cannot write, a
// node on Kafka answers /healthz 200 degraded, and a task larger than a bus
// message, which goes through the log, 503. The degraded reason says so, as
// the operator's warning does, so that a client or an operator reading
// /healthz learns which tasks are refused meanwhile; it said only that new
// tasks wait on the bus, which the 503 of a large task then contradicted.
func TestDegradedSaysLargeTasksAreRefused(t *testing.T) {
	logs := &syncBuf{}
	l := &stoppedLog{unwritableLog: *newUnwritableLog(t)}
	n := newKafkaEnv(t).nodeWith(t, node.Config{Log: l, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	l.failing.Store(true)
	code, body := healthBody(t, n.Handler())
	if code != http.StatusOK || body["status"] != "degraded" {
		t.Fatalf("/healthz on Kafka while the log cannot write: %d %v; want 200 degraded", code, body)
	}
	big := strings.Repeat("x", messages.BusMessageMax+1)
	if code, out, err := postTask(srv.URL, `{"input":"`+big+`","session_id":"big"}`); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("POST /v1/tasks, a task larger than a bus message, while the log cannot write: %d %.200s %v; want 503", code, out, err)
	}
	want := fmt.Sprintf("those over %d KiB, too large for a bus message, go through the log and are refused", messages.BusMessageMax>>10)
	if !strings.Contains(body["reason"], want) {
		t.Errorf("/healthz degraded: %q; want it to say %q", body["reason"], want)
	}
	waitFor(t, 10*time.Second, "the outage's warning", func() bool { return strings.Contains(logs.String(), "event log writes fail") })
	if out := logs.String(); !strings.Contains(out, want) {
		t.Errorf("the outage's warning on Kafka: %s; want it to say %q", out, want)
	}
}
