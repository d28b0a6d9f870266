package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// `node mcp` stopped with SIGTERM while a run_task's model call runs stops as
// `node serve` does: the node closes first (the call in flight answers within
// the handoff grace and is recorded, the task is left unfinished, not cancelled),
// and only then does its Run end. A node started again on the same directory
// finishes the task without asking the model again. Before, the node ran under
// the signal's context: the signal ended Run (and the client's call) before
// Close began, and the task was recorded as cancelled.
func TestNodeMCPSigtermMidCallRepeatsNoCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops node processes")
	}
	clearLLMEnv(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[
		{"tool_calls":[{"id":"a","name":"record","arguments":"{\"n\":1}"}]},
		{"content":"done through the stop"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
	// The model call takes a second, well within the handoff grace (5 s).
	cmd := exec.Command(os.Args[0], "mcp", "--model", "scripted:"+script, "--data", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+records, "TROUPE_MODEL_LOG="+modelLog, "TROUPE_MODEL_DELAY=1s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd.Stdout = io.Discard
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := &child{cmd: cmd, stderr: stderr}
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"finish through a stop","session_id":"mcp-term-1"}}}`,
	} {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "the task's model call", func() bool {
		b, _ := os.ReadFile(modelLog)
		return len(b) > 0
	})
	first.sigterm(t, time.Minute)
	if calls := countLines(t, modelLog, ""); len(calls) != 1 {
		t.Errorf("model calls %v made by the node stopped mid-call: want the one in flight at SIGTERM only (a stopping node issues no more)\n%s",
			calls, tail(stderr.String(), 8000))
	}

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	ids := []string{"mcp-term-1"}
	events, err := lg.Read(t.Context(), ids[0], 1)
	if err != nil || len(events) == 0 {
		t.Fatalf("the task's events: %d, %v", len(events), err)
	}
	for _, e := range events {
		if e.Type == messages.TypeTaskFailed {
			t.Errorf("the SIGTERM recorded %s %s: the task was cancelled, where it must be left to resume", e.Type, e.Payload)
		}
	}
	modelDone, _, unfinished := recordedIn(t, lg, ids)
	if unfinished != 1 {
		t.Fatalf("the task ended as the node stopped, where it must be left to resume\n%s", tail(stderr.String(), 8000))
	}
	if len(modelDone) != 1 {
		t.Errorf("the model call in flight at SIGTERM was not recorded (%d answers), where the stop gives it the handoff grace\n%s", len(modelDone), tail(stderr.String(), 8000))
	}

	second := startChildWith(t, dir, script, records, modelLog, nil)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	if t.Failed() {
		return
	}
	waitCompleted(t, second, ids, "done through the stop", 30*time.Second)
	if calls := countLines(t, modelLog, ""); len(calls) != 2 || sum(calls) != 2 {
		t.Errorf("model calls %v: want the task's two, each made once (the first before the stop)", calls)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// A second SIGTERM (or Ctrl-C) while `node mcp` stops, its model call in flight
// given the handoff grace, ends the process at once, as the signal's default
// action does: the user (or a supervisor) asked twice. Before, the first signal
// kept the signals caught until the process ended, and the second was ignored: the
// process went on through the grace.
func TestNodeMCPSecondSigtermQuitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops node processes")
	}
	clearLLMEnv(t)
	dir := t.TempDir()
	modelLog := filepath.Join(dir, "model.txt")
	// The model call takes a minute: the stop waits the handoff grace for it.
	cmd := exec.Command(os.Args[0], "mcp", "--model", "offline", "--data", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_MODEL_LOG="+modelLog, "TROUPE_MODEL_DELAY=1m")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd.Stdout = io.Discard
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"a long one","session_id":"mcp-twice-1"}}}`,
	} {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "the task's model call", func() bool {
		b, _ := os.ReadFile(modelLog)
		return len(b) > 0
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the stop to begin", func() bool { return strings.Contains(stderr.String(), "shutting down") })
	select {
	case <-exited:
		t.Fatalf("the node exited within its grace, before the second signal: the test proves nothing\n%s", tail(stderr.String(), 4000))
	default:
	}
	second := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if took := time.Since(second); took > 2*time.Second {
			t.Errorf("the node exited %v after the second SIGTERM; want at once", took)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("the node still runs 2 s after a second SIGTERM: it went on through its grace\n%s", tail(stderr.String(), 4000))
	}
}
