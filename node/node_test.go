package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

func startNode(t *testing.T, dir string) (*node.Node, *httptest.Server) {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-n.Running():
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("node did not start")
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(func() {
		n.CloseStreams()
		srv.Close()
		cancel()
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after Close")
		}
	})
	return n, srv
}

func post(t *testing.T, url, body string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]string{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func getStatus(t *testing.T, url string) (int, messages.TaskResult) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r messages.TaskResult
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

func waitDone(t *testing.T, base, id string) messages.TaskResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		code, r := getStatus(t, base+"/v1/sessions/"+id)
		if code == http.StatusOK && r.Status != messages.StatusRunning {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("session %s did not finish", id)
	return messages.TaskResult{}
}

func TestHTTPTaskAnswersThroughTheCalculator(t *testing.T) {
	_, srv := startNode(t, t.TempDir())
	code, out := post(t, srv.URL+"/v1/tasks", `{"input":"What is 12 * (7 + 5)?"}`)
	if code != http.StatusAccepted || out["session_id"] == "" {
		t.Fatalf("POST: %d %v", code, out)
	}
	r := waitDone(t, srv.URL, out["session_id"])
	if r.Status != messages.StatusCompleted || r.Output != "144" {
		t.Fatalf("result: %+v", r)
	}
	resp, err := http.Get(srv.URL + "/v1/sessions/" + out["session_id"] + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []messages.Envelope
	if err := json.NewDecoder(resp.Body).Decode(&events); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("seq %d at %d", e.Seq, i)
		}
		kinds = append(kinds, string(e.Type))
	}
	want := "task.submitted model.requested model.responded tool.requested tool.completed model.requested model.responded task.completed"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("events: %v", kinds)
	}
}

func TestHTTPBadInputIsRejectedAndChangesNothing(t *testing.T) {
	n, srv := startNode(t, t.TempDir())
	cases := map[string]string{
		"malformed JSON":   `{"input": "x"`,
		"missing input":    `{"session_id":"a"}`,
		"empty input":      `{"input":""}`,
		"unknown field":    `{"input":"x","inptu":"y"}`,
		"wrong type":       `{"input":42}`,
		"bad session id":   `{"input":"x","session_id":"../../etc"}`,
		"negative steps":   `{"input":"x","max_steps":-1}`,
		"trailing garbage": `{"input":"x"} {"input":"y"}`,
		"unknown agent":    `{"input":"x","agent":"nope"}`,
	}
	for name, body := range cases {
		code, out := post(t, srv.URL+"/v1/tasks", body)
		if code != http.StatusBadRequest || out["error"] == "" {
			t.Errorf("%s: %d %v", name, code, out)
		}
	}
	resp, err := http.Post(srv.URL+"/v1/tasks", "application/json", strings.NewReader(`{"input":"`+strings.Repeat("x", 3<<20)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", resp.StatusCode)
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil || len(infos) != 0 {
		t.Fatalf("bad requests wrote sessions: %v %v", infos, err)
	}
	if code, _ := getStatus(t, srv.URL+"/v1/sessions/nope"); code != http.StatusNotFound {
		t.Errorf("unknown session: %d", code)
	}
	if resp, _ := http.Get(srv.URL + "/v1/sessions/nope/events"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown session events: %d", resp.StatusCode)
	}
	if code, _ := post(t, srv.URL+"/v1/sessions/nope/cancel", ""); code != http.StatusNotFound {
		t.Errorf("cancel unknown session: %d", code)
	}
}

func TestSSEStreamsEveryEventInOrder(t *testing.T) {
	_, srv := startNode(t, t.TempDir())
	code, out := post(t, srv.URL+"/v1/tasks", `{"input":"What is 2^10?","session_id":"sse-1"}`)
	if code != http.StatusAccepted {
		t.Fatal(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/sessions/"+out["session_id"]+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var seqs []string
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			seqs = append(seqs, id)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"type":"task.completed"`) {
			if !strings.Contains(line, `"output":"1024"`) {
				t.Fatalf("completion: %s", line)
			}
			break
		}
	}
	if strings.Join(seqs, ",") != "1,2,3,4,5,6,7,8" {
		t.Fatalf("stream ids: %v (err %v)", seqs, sc.Err())
	}
	// Resuming with Last-Event-ID sends only what follows.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/sessions/sse-1/stream", nil)
	req.Header.Set("Last-Event-ID", "6")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	sc = bufio.NewScanner(resp2.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ids []string
	for sc.Scan() && len(ids) < 2 {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			ids = append(ids, id)
		}
	}
	if strings.Join(ids, ",") != "7,8" {
		t.Fatalf("resumed stream ids: %v", ids)
	}
}

func TestSecondNodeOnTheSameDirectoryRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	startNode(t, dir)
	_, err := node.New(context.Background(), node.Config{DataDir: dir})
	if !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("second node: %v", err)
	}
}

func TestNodeRestartResumesAndKeepsSeq(t *testing.T) {
	dir := t.TempDir()
	n, srv := startNode(t, dir)
	_, out := post(t, srv.URL+"/v1/tasks", `{"input":"echo first","session_id":"keep"}`)
	waitDone(t, srv.URL, out["session_id"])
	n.CloseStreams()
	srv.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	_, srv2 := startNode(t, dir)
	_, out = post(t, srv2.URL+"/v1/tasks", `{"input":"echo second","session_id":"keep"}`)
	r := waitDone(t, srv2.URL, "keep")
	if r.Output != "second" {
		t.Fatalf("result: %+v", r)
	}
	resp, err := http.Get(srv2.URL + "/v1/sessions/keep/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var events []messages.Envelope
	if err := json.Unmarshal(b, &events); err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("seq %d at %d", e.Seq, i)
		}
	}
	if len(events) != 8 {
		t.Fatalf("%d events", len(events))
	}
}

func TestCancelOverHTTP(t *testing.T) {
	_, srv := startNode(t, t.TempDir())
	_, out := post(t, srv.URL+"/v1/tasks", `{"input":"echo quick","session_id":"c1"}`)
	waitDone(t, srv.URL, out["session_id"])
	if code, _ := post(t, srv.URL+"/v1/sessions/c1/cancel", ""); code != http.StatusConflict {
		t.Fatalf("cancel of an idle session: %d", code)
	}
}
