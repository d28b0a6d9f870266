package node_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/smalldisk"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// diskFullNode is a node whose data directory is on a small filesystem, with a
// scripted model (a call of tool "count", then an answer) and tool "count", each
// counting its calls. The tool waits while gate holds a channel.
type diskFullNode struct {
	*node.Node
	cfg         node.Config
	disk        string
	model       *recording
	toolCalls   atomic.Int64
	gate        atomic.Pointer[chan struct{}]
	toolStarted chan string
}

func startDiskFullNode(t *testing.T, cfg node.Config) *diskFullNode {
	t.Helper()
	d := &diskFullNode{disk: smalldisk.Mount(t), toolStarted: make(chan string, 16)}
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "count", Arguments: "{}"}}},
		{Content: "counted"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d.model = &recording{Model: script}
	count := tools.MustFunc("count", "Counts its calls.", func(ctx context.Context, _ noArgs) (string, error) {
		n := d.toolCalls.Add(1)
		if g := d.gate.Load(); g != nil {
			d.toolStarted <- "started"
			select {
			case <-*g:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return fmt.Sprint(n), nil
	}, tools.WithTimeout(time.Minute))
	cfg.DataDir = filepath.Join(d.disk, "data")
	cfg.Model, cfg.Tools = d.model, []tools.Tool{count}
	d.cfg = cfg
	d.Node = nodetest.Start(t, cfg)
	return d
}

// postTask posts a task and returns the answer's status and body, or the error
// of a request that got no answer.
func postTask(url, body string) (int, string, error) {
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Post(url+"/v1/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitStatus waits (at most 20 s) for session id's latest task to end, and returns
// its status.
func (d *diskFullNode) waitStatus(t *testing.T, id string) string {
	t.Helper()
	var status string
	waitFor(t, 20*time.Second, "session "+id+" to finish its task", func() bool {
		infos, err := d.Log().Sessions(context.Background(), eventlog.Filter{Prefix: id})
		for _, i := range infos {
			if i.ID == id && err == nil && i.Status != messages.StatusRunning {
				status = i.Status
				return true
			}
		}
		return false
	})
	return status
}

// checkLog checks that each session verifies against its agent's code, and that
// SQLite finds the database file sound.
func (d *diskFullNode) checkLog(t *testing.T, sessions ...string) {
	t.Helper()
	agent, err := d.cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range sessions {
		events, err := d.Log().Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if div, err := actors.Verify(agent, events); err != nil || div != nil {
			t.Errorf("session %s does not verify: %v %v", id, div, err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.cfg.DataDir, "events.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check: %q %v", ok, err)
	}
}

// TestFullDiskRefusesANewTaskAtOnce: on a full disk a new task is refused at once,
// over HTTP with a 503 that says the disk is full and from Go (node run) with an
// error that is eventlog.ErrFull, and it is not recorded later, once space is
// freed, behind the back of a client told it was not: it ran only when sent
// again. New tasks then run without a restart. Before, the client waited for
// SubmitTimeout, got "not recorded within 30s" (or, over HTTP, its connection
// closed without an answer: the write timeout had passed), and the session kept
// retrying the write, recording and running the task once space came back.
func TestFullDiskRefusesANewTaskAtOnce(t *testing.T) {
	d := startDiskFullNode(t, node.Config{SubmitTimeout: 10 * time.Second})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	if code, body, err := postTask(srv.URL, `{"input":"before","session_id":"before"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task before the disk filled: %d %s %v", code, body, err)
	}
	if s := d.waitStatus(t, "before"); s != messages.StatusCompleted {
		t.Fatalf("the task before the disk filled ended %s", s)
	}

	free := smalldisk.Fill(t, d.disk)
	code, body, err := postTask(srv.URL, `{"input":"full","session_id":"full-http"}`)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "disk is full") || !strings.Contains(body, "not recorded") {
		t.Errorf("a task on a full disk was answered %d %s (%v); want 503 saying the disk is full and the task not recorded", code, body, err)
	}
	_, err = d.Submit(context.Background(), node.Task{Input: "full", SessionID: "full-go"})
	if !errors.Is(err, eventlog.ErrFull) {
		t.Errorf("Submit on a full disk: %v; want eventlog.ErrFull", err)
	}
	free()
	// New tasks are refused until the log learns that it can write again (at most
	// a second later), as /healthz says.
	waitFor(t, 10*time.Second, "/healthz to answer 200 once space is freed", func() bool {
		code, _ := getPath(d.Handler(), "/healthz")
		return code == http.StatusOK
	})

	if code, body, err := postTask(srv.URL, `{"input":"after","session_id":"after"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task once space was freed: %d %s %v", code, body, err)
	}
	if s := d.waitStatus(t, "after"); s != messages.StatusCompleted {
		t.Fatalf("the task once space was freed ended %s", s)
	}
	// A session's write retried in place would have gone through by now: the
	// retries' backoff is at most 5 s.
	time.Sleep(6 * time.Second)
	for _, id := range []string{"full-http", "full-go"} {
		if events, err := d.Log().Read(context.Background(), id, 1); err != nil || len(events) != 0 {
			t.Errorf("session %s, whose task was refused, holds %d events (%v)", id, len(events), err)
		}
	}
	// Sent again, the refused task runs, once.
	if code, body, err := postTask(srv.URL, `{"input":"full","session_id":"full-http"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("the refused task sent again: %d %s %v", code, body, err)
	}
	if s := d.waitStatus(t, "full-http"); s != messages.StatusCompleted {
		t.Fatalf("the refused task sent again ended %s", s)
	}
	if n := len(d.model.requests()); n != 6 {
		t.Errorf("%d model calls for 3 tasks of 2 calls each", n)
	}
	if n := d.toolCalls.Load(); n != 3 {
		t.Errorf("%d tool calls for 3 tasks of 1 call each", n)
	}
	d.checkLog(t, "before", "after", "full-http")
}

// TestFullDiskMidTaskResumes: a session whose tool answers while the disk is full
// keeps the answer and retries its write; a task sent to it meanwhile is answered
// 503 over HTTP (the answer reaches the client although it waited past the write
// timeout); once space is freed the session finishes without calling the model
// or the tool again, and the log is sound.
func TestFullDiskMidTaskResumes(t *testing.T) {
	d := startDiskFullNode(t, node.Config{SubmitTimeout: 3 * time.Second, HTTP: node.HTTPConfig{WriteTimeout: 2 * time.Second}})
	url := d.serve(t)
	gate := make(chan struct{})
	d.gate.Store(&gate)
	if code, body, err := postTask(url, `{"input":"mid","session_id":"mid"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task: %d %s %v", code, body, err)
	}
	select {
	case <-d.toolStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool was not called")
	}
	free := smalldisk.Fill(t, d.disk)
	d.gate.Store(nil)
	close(gate) // its result cannot be written

	code, body, err := postTask(url, `{"input":"behind","session_id":"mid"}`)
	if err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("a task behind a write retried on a full disk: %d %s (%v); want a 503", code, body, err)
	}
	free()
	// The task sent behind may be recorded once the write goes through (the 503
	// says so): each task the session recorded completes, its model called twice
	// and its tool once.
	var events []messages.Envelope
	waitFor(t, 20*time.Second, "the session's tasks to complete", func() bool {
		events, err = d.Log().Read(context.Background(), "mid", 1)
		tasks, ends := 0, 0
		for _, e := range events {
			switch e.Type {
			case messages.TypeTaskSubmitted:
				tasks++
			case messages.TypeTaskCompleted:
				ends++
			}
		}
		return err == nil && tasks > 0 && tasks == ends && int64(tasks) == d.toolCalls.Load() && len(d.model.requests()) == 2*tasks
	})
	d.checkLog(t, "mid")
}

// serve serves the node's HTTP API as node serve does (Node.HTTPServer, with
// Config.HTTP's timeouts) and returns its URL.
func (d *diskFullNode) serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := d.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return "http://" + ln.Addr().String()
}

// getPath serves a GET of path on h and returns the answer's status and body.
func getPath(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestHealthzFollowsAFullDisk: while the event log cannot write for a full disk,
// /healthz answers 503 with a reason naming the full disk (a load balancer stops
// sending tasks the node can only refuse), while /livez stays 200 (a liveness
// probe does not kill the node in a loop); once space is freed the node learns it
// with no task sent and no health check made (troupe_eventlog_writes_failing back
// to 0), and /healthz is 200 again. Before, /healthz said ok throughout.
func TestHealthzFollowsAFullDisk(t *testing.T) {
	d := startDiskFullNode(t, node.Config{SubmitTimeout: 10 * time.Second})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	h := d.Handler()
	if code, body, err := postTask(srv.URL, `{"input":"before","session_id":"before"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task before the disk filled: %d %s %v", code, body, err)
	}
	if s := d.waitStatus(t, "before"); s != messages.StatusCompleted {
		t.Fatalf("the task before the disk filled ended %s", s)
	}
	if code, body := getPath(h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before the disk filled: %d %s", code, body)
	}

	free := smalldisk.Fill(t, d.disk)
	if code, body, err := postTask(srv.URL, `{"input":"full","session_id":"full"}`); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("a task on a full disk: %d %s %v; want 503", code, body, err)
	}
	for range 3 {
		code, body := getPath(h, "/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"unhealthy"`) || !strings.Contains(body, "disk is full") {
			t.Fatalf("/healthz on a full disk: %d %s; want 503 naming the full disk", code, body)
		}
	}
	if code, body := getPath(h, "/livez"); code != http.StatusOK {
		t.Errorf("/livez on a full disk: %d %s; want 200: restarting the node frees no space", code, body)
	}
	if v := metric(t, d.Node, "troupe_eventlog_writes_failing"); v != 1 {
		t.Errorf("troupe_eventlog_writes_failing on a full disk: %d, want 1", v)
	}

	free()
	waitFor(t, 10*time.Second, "the node to learn that space was freed, with no write of its own", func() bool {
		return metric(t, d.Node, "troupe_eventlog_writes_failing") == 0
	})
	if code, body := getPath(h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz once space was freed: %d %s", code, body)
	}
	if code, body, err := postTask(srv.URL, `{"input":"after","session_id":"after"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("a task once space was freed: %d %s %v", code, body, err)
	}
	if s := d.waitStatus(t, "after"); s != messages.StatusCompleted {
		t.Fatalf("the task once space was freed ended %s", s)
	}
}

// TestFullDiskOutageIsLoggedOnce: sessions whose writes a full disk refuses retry
// them, and the node logs the outage once as it starts (its cause) and once as it
// ends (how long, how many writes waited), not a warning per session and attempt
// (100 sessions made 100 lines every 5 s); the attempts are counted in
// troupe_eventlog_write_failures_total.
func TestFullDiskOutageIsLoggedOnce(t *testing.T) {
	logs := &syncBuf{}
	d := startDiskFullNode(t, node.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	gate := make(chan struct{})
	d.gate.Store(&gate)
	const sessions = 4
	for i := range sessions {
		if code, body, err := postTask(srv.URL, fmt.Sprintf(`{"input":"wait","session_id":"s%d"}`, i)); err != nil || code != http.StatusAccepted {
			t.Fatalf("task %d: %d %s %v", i, code, body, err)
		}
	}
	for range sessions {
		select {
		case <-d.toolStarted:
		case <-time.After(20 * time.Second):
			t.Fatal("the tool was not called")
		}
	}
	free := smalldisk.Fill(t, d.disk)
	d.gate.Store(nil)
	close(gate) // the tools' results cannot be written
	waitFor(t, 20*time.Second, "the sessions to retry their writes", func() bool {
		return metric(t, d.Node, "troupe_eventlog_write_failures_total") >= 3*sessions
	})
	free()
	for i := range sessions {
		if s := d.waitStatus(t, fmt.Sprintf("s%d", i)); s != messages.StatusCompleted {
			t.Fatalf("session s%d ended %s", i, s)
		}
	}

	var starts, ends, attempts int
	var end map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case strings.HasPrefix(msg, "event log writes fail"):
			starts++
			if err, _ := rec["err"].(string); !strings.Contains(err, "disk is full") {
				t.Errorf("the outage's first line does not name its cause: %s", line)
			}
		case msg == "event log writes go through again":
			ends++
			end = rec
		case strings.HasPrefix(msg, "event log write"):
			attempts++
		}
	}
	if starts != 1 || ends != 1 || attempts != 0 {
		t.Fatalf("%d lines for the outage's start, %d for its end, %d for sessions' attempts; want 1, 1, 0:\n%s", starts, ends, attempts, logs.String())
	}
	if w, _ := end["writes_waited"].(float64); w != sessions {
		t.Errorf("the outage's end says %v writes waited, want %d: %v", end["writes_waited"], sessions, end)
	}
	if _, ok := end["outage"]; !ok {
		t.Errorf("the outage's end does not say how long it lasted: %v", end)
	}
	d.checkLog(t, "s0", "s1", "s2", "s3")
}
