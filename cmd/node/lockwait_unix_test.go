//go:build unix

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A node started on the data directory of a node that still runs (the one it
// replaces, stopping) waits for the data lock, and its port answers meanwhile:
// GET /livez 200, GET /healthz 503 naming the lock's holder, and a task 503 with
// Retry-After; once the other node lets go, it serves. Before, the port was bound
// but answered nothing for up to 30 s, so that a liveness probe with a short
// timeout failed and an orchestrator restarted the node.
func TestServeAnswersWhileItWaitsForTheDataLock(t *testing.T) {
	dir := t.TempDir()
	script, records, modelLog := threeRecordsScript(t, dir)
	first := startChild(t, dir, script, records, modelLog)
	defer func() { _ = first.cmd.Process.Kill(); _ = first.cmd.Wait() }()

	second := startSecondServe(t, dir, script, records, modelLog)
	cmd, addr, stderr := second.cmd, second.addr, second.stderr
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	probe := &http.Client{Timeout: time.Second} // a Kubernetes probe's default
	get := func(path string) (*http.Response, string, error) {
		resp, err := probe.Get("http://" + addr + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	// The port is bound before the wait starts: give the process the time to
	// start, but a probe that times out on a bound port is what failed.
	var livez *http.Response
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if livez, _, err = get("/livez"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || livez.StatusCode != http.StatusOK {
		t.Fatalf("GET /livez while the node waits for the data lock = %v, %v, want 200\n%s", livez, err, tail(stderr.String(), 4000))
	}
	resp, body, err := get("/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var health struct{ Status, Reason string }
	_ = json.Unmarshal([]byte(body), &health)
	holder := "held by pid " + strconv.Itoa(first.cmd.Process.Pid)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(health.Reason, "waiting for the data lock "+holder) {
		t.Fatalf("GET /healthz while the node waits for the data lock = %d %s, want 503 naming the lock %s", resp.StatusCode, body, holder)
	}
	task, err := probe.Post("http://"+addr+"/v1/tasks", "application/json", strings.NewReader(`{"input":"record"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(task.Body)
	task.Body.Close()
	if task.StatusCode != http.StatusServiceUnavailable || task.Header.Get("Retry-After") == "" || !strings.Contains(string(b), holder) {
		t.Fatalf("POST /v1/tasks while the node waits for the data lock = %d (Retry-After %q) %s, want 503 with Retry-After naming the lock", task.StatusCode, task.Header.Get("Retry-After"), b)
	}

	first.sigterm(t, 60*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, body, err := get("/healthz")
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not serve once the lock was let go: %v %s\n%s", err, body, tail(stderr.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	second.post(t, `{"input":"record"}`)
}

// A node that is told to stop (SIGTERM) while it waits for the data lock
// another node holds stops cleanly: exit 0, saying it stopped before it
// started. Before, New's wait ended with the context's error, which serve
// printed as "error: ..." and exited 1, so that a supervisor counted a
// requested stop as a failure.
func TestServeStoppedWhileItWaitsForTheDataLockExitsZero(t *testing.T) {
	dir := t.TempDir()
	script, records, modelLog := threeRecordsScript(t, dir)
	first := startChild(t, dir, script, records, modelLog)
	defer func() { _ = first.cmd.Process.Kill(); _ = first.cmd.Wait() }()

	second := startSecondServe(t, dir, script, records, modelLog)
	cmd, addr, stderr := second.cmd, second.addr, second.stderr
	defer func() { _ = cmd.Process.Kill() }()

	// Wait until the second node says it waits for the lock the first holds.
	probe := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "waiting for the data lock") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second node never said it waits for the data lock: %v\n%s", err, tail(stderr.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	second.sigterm(t, 30*time.Second)
	out := stderr.String()
	if strings.Contains(out, "error:") || !strings.Contains(out, "stopped before starting") {
		t.Fatalf("stderr of a node stopped while it waited for the data lock, want no error and a line saying it stopped before starting:\n%s", tail(out, 4000))
	}
	// The first node still serves: the second let go of nothing it did not hold.
	first.post(t, `{"input":"record"}`)
}

// startSecondServe starts a second `serve` on dir's data directory, whose lock the
// first node holds; the caller kills and waits for it.
func startSecondServe(t *testing.T, dir, script, records, modelLog string) *child {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--data", filepath.Join(dir, "data"), "--http", addr, "--model", "scripted:"+script)
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+records, "TROUPE_MODEL_LOG="+modelLog)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &child{cmd: cmd, addr: addr, stderr: stderr}
}
