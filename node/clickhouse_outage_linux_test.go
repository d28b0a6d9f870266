package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// TestClickHouseOutageHealthz stops the real ClickHouse server under a node whose
// sessions are in the middle of their tasks, and starts it again. While it is
// down, /healthz answers 503 with a reason naming the event log and why its writes
// fail (a load balancer stops sending the node tasks it cannot record), /livez
// stays 200 (restarting the node would not bring ClickHouse back), and the outage
// is logged once, by the node and by the log's writer, not at every attempt;
// once the server is back, the node learns it by itself (the writer's next
// attempt, or the log's probe), /healthz is 200 again, the outage's end is logged once, and every task
// completes with its tool called once. Before, /healthz said ok throughout, and
// the writer logged a warning at every attempt.
//
// It runs only with TROUPE_TEST_CLICKHOUSE_CONTROL=1, since it stops the server
// with deploy/clickhouse.sh (which must manage the server at
// TROUPE_TEST_CLICKHOUSE; TROUPE_DEPLOY_RUN, CLICKHOUSE_PORT and the like are
// passed through), as eventlog/clickhouse's TestOutage does: run it on its own.
func TestClickHouseOutageHealthz(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set")
	}
	if os.Getenv("TROUPE_TEST_CLICKHOUSE_CONTROL") != "1" {
		t.Skip("TROUPE_TEST_CLICKHOUSE_CONTROL is not 1: this test stops and starts the ClickHouse server with deploy/clickhouse.sh")
	}
	script, err := filepath.Abs(filepath.Join("..", "deploy", "clickhouse.sh"))
	if err != nil {
		t.Fatal(err)
	}
	server := func(cmds ...string) {
		t.Helper()
		for _, c := range cmds {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			out, err := exec.CommandContext(ctx, "bash", script, c).CombinedOutput()
			cancel()
			t.Logf("deploy/clickhouse.sh %s: %s", c, out)
			if err != nil {
				t.Fatalf("deploy/clickhouse.sh %s: %v", c, err)
			}
		}
	}
	db := chtest.Database(t, addr, "troupe_health_") // dropped once the server runs again
	// Whatever happens, leave the server running for the tests after this one.
	t.Cleanup(func() { server("start", "wait") })

	logs := &syncBuf{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	lg, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, Logger: logger,
		RetryInitialBackoff: 50 * time.Millisecond, RetryMaxBackoff: time.Second, DialTimeout: time.Second, QueryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })

	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "count", Arguments: "{}"}}},
		{Content: "counted"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		toolCalls atomic.Int64
		gate      = make(chan struct{})
		started   = make(chan struct{}, 16)
	)
	gated := atomic.Bool{}
	count := tools.MustFunc("count", "Counts its calls.", func(ctx context.Context, _ noArgs) (string, error) {
		n := toolCalls.Add(1)
		if gated.Load() {
			started <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return fmt.Sprint(n), nil
	}, tools.WithTimeout(time.Minute))
	n := nodetest.Start(t, node.Config{Log: lg, Model: model, Tools: []tools.Tool{count}, Logger: logger})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	h := n.Handler()
	waitDone := func(id string) {
		t.Helper()
		waitFor(t, 2*time.Minute, "session "+id+" to complete its task", func() bool {
			infos, err := lg.Sessions(ctx, eventlog.Filter{Prefix: id})
			return err == nil && len(infos) == 1 && infos[0].Status == messages.StatusCompleted
		})
	}

	if code, body, err := postTask(srv.URL, `{"input":"before","session_id":"before"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task before the outage: %d %s %v", code, body, err)
	}
	waitDone("before")
	if code, body := getPath(h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before the outage: %d %s", code, body)
	}

	gated.Store(true)
	const sessions = 4
	for i := range sessions {
		if code, body, err := postTask(srv.URL, fmt.Sprintf(`{"input":"wait","session_id":"s%d"}`, i)); err != nil || code != http.StatusAccepted {
			t.Fatalf("task %d: %d %s %v", i, code, body, err)
		}
	}
	for range sessions {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the tool was not called")
		}
	}
	server("stop")
	close(gate) // the tools' results cannot be written
	waitFor(t, time.Minute, "the writer to retry the sessions' writes", func() bool { return lg.Stats().Retries >= 5 })
	var reason string
	waitFor(t, 30*time.Second, "/healthz to answer 503 while ClickHouse is down", func() bool {
		code, body := getPath(h, "/healthz")
		reason = body
		return code == http.StatusServiceUnavailable
	})
	t.Logf("/healthz while ClickHouse is down: %s", reason)
	if !strings.Contains(reason, "the event log cannot write") || !strings.Contains(reason, addr) {
		t.Errorf("/healthz while ClickHouse is down: %s; want a reason naming the event log and the server", reason)
	}
	for range 3 {
		if code, body := getPath(h, "/healthz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/healthz while ClickHouse is down: %d %s; want 503", code, body)
		}
	}
	if code, body := getPath(h, "/livez"); code != http.StatusOK {
		t.Errorf("/livez while ClickHouse is down: %d %s; want 200: restarting the node does not bring ClickHouse back", code, body)
	}
	if v := metric(t, n, "troupe_eventlog_writes_failing"); v != 1 {
		t.Errorf("troupe_eventlog_writes_failing while ClickHouse is down: %d, want 1", v)
	}
	// A new task while the log cannot write is refused at once, with nothing
	// recorded. It used to wait in its session behind the writer's retries, be
	// answered 503 after SubmitTimeout ("may still record it"), and then be
	// recorded and run once ClickHouse came back.
	if code, body, err := postTask(srv.URL, `{"input":"during","session_id":"during"}`); err != nil || code != http.StatusServiceUnavailable ||
		!strings.Contains(body, "the task was not recorded: the event log cannot write") {
		t.Errorf("a new task while ClickHouse is down: %d %s %v; want 503 saying that it was not recorded", code, body, err)
	}
	time.Sleep(2 * time.Second) // more attempts of the writer, more probes of the node

	server("start", "wait")
	waitFor(t, time.Minute, "the node to learn that ClickHouse is back", func() bool {
		return metric(t, n, "troupe_eventlog_writes_failing") == 0
	})
	if code, body := getPath(h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz once ClickHouse is back: %d %s", code, body)
	}
	for i := range sessions {
		waitDone(fmt.Sprintf("s%d", i))
	}
	if c := toolCalls.Load(); c != sessions+1 {
		t.Errorf("the tool was called %d times, want %d: once per task", c, sessions+1)
	}
	if code, body, err := postTask(srv.URL, `{"input":"after","session_id":"after"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task once ClickHouse is back: %d %s %v", code, body, err)
	}
	waitDone("after")
	if infos, err := lg.Sessions(ctx, eventlog.Filter{Prefix: "during"}); err != nil || len(infos) != 0 {
		t.Errorf("the task refused during the outage: sessions %+v, %v; want none: it was not recorded", infos, err)
	}
	if c := toolCalls.Load(); c != sessions+2 {
		t.Errorf("the tool was called %d times, want %d: once per task accepted", c, sessions+2)
	}

	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		for _, kind := range []string{"event log writes fail", "event log writes go through again", "event log write failed",
			"eventlog/clickhouse: writes fail", "eventlog/clickhouse: writes go through again", "eventlog/clickhouse: write failed"} {
			if strings.HasPrefix(msg, kind) {
				counts[kind]++
			}
		}
	}
	want := map[string]int{"event log writes fail": 1, "event log writes go through again": 1,
		"eventlog/clickhouse: writes fail": 1, "eventlog/clickhouse: writes go through again": 1}
	for _, kind := range []string{"event log writes fail", "event log writes go through again", "event log write failed",
		"eventlog/clickhouse: writes fail", "eventlog/clickhouse: writes go through again", "eventlog/clickhouse: write failed"} {
		if counts[kind] != want[kind] {
			t.Errorf("%d log lines %q, want %d (the writer retried %d times)", counts[kind], kind, want[kind], lg.Stats().Retries)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if t.Failed() || strings.Contains(line, "writes fail") || strings.Contains(line, "writes go through") {
			t.Log(line)
		}
	}
}
