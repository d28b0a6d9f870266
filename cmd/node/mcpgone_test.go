package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// `node mcp` whose client goes away while a run_task runs (an editor that quits
// or dies: stdin and stdout both closed, and stderr too when the editor held its
// read end) ends as when its client closes stdin: the call is cancelled, its task
// recorded as cancelled, the node stops and exits 0 with no error logged. Its
// first write to the closed stdout (a ping, every progress_interval while the call
// runs) killed it with SIGPIPE, mid-task; with stderr closed too, so did the
// node's shutdown log, written once the command had stopped asking for SIGPIPE.
func TestNodeMCPClientGoneMidCall(t *testing.T) {
	clearLLMEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		closeStderr bool
	}{{"stdin and stdout closed", false}, {"stdin, stdout and stderr closed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "troupe.json")
			if err := os.WriteFile(config, []byte(`{"mcp_server":{"progress_interval":"200ms"}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			modelLog := filepath.Join(dir, "model.log")
			// The test binary is the node (TestMain, TROUPE_CRASH_CHILD); its model call
			// takes a minute, so that the call runs when the client goes.
			cmd := exec.Command(exe, "mcp", "--model", "offline", "--config", config, "--data", filepath.Join(dir, "data"))
			cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_MODEL_LOG="+modelLog, "TROUPE_MODEL_DELAY=1m")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb syncBuffer
			// stderr is a pipe of the test's own, so that it can close its read end
			// while the node runs; what the node logs is copied until then.
			errRead, errWrite, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer errRead.Close()
			cmd.Stderr = errWrite
			if err := cmd.Start(); err != nil {
				errWrite.Close()
				t.Fatal(err)
			}
			errWrite.Close()
			copied := make(chan struct{})
			go func() {
				defer close(copied)
				_, _ = io.Copy(&errb, errRead)
			}()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			ended := false
			defer func() {
				if !ended {
					_ = cmd.Process.Kill()
					<-exited
				}
			}()
			for _, line := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"what is 2+3?","session_id":"gone-1"}}}`,
			} {
				if _, err := io.WriteString(stdin, line+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 20*time.Second, "the task's model call", func() bool {
				b, _ := os.ReadFile(modelLog)
				return len(b) > 0
			})
			if tc.closeStderr {
				errRead.Close()
				<-copied
			}
			stdin.Close()
			stdout.Close()
			select {
			case err := <-exited:
				ended = true
				if err != nil {
					t.Fatalf("node mcp ended with %v after its client went away, want exit 0\n%s", err, errb.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("node mcp did not end within 30 s of its client going away\n%s", errb.String())
			}
			<-copied
			if strings.Contains(errb.String(), "level=ERROR") {
				t.Errorf("node mcp logged an error for a client that went away:\n%s", errb.String())
			}
			lg := openDataReadOnly(t, dir)
			defer lg.Close()
			events, err := lg.Read(context.Background(), "gone-1", 1)
			if err != nil || len(events) == 0 {
				t.Fatalf("the task's events: %d, %v", len(events), err)
			}
			last := events[len(events)-1]
			p, err := last.Decode()
			if f, ok := p.(*messages.TaskFailed); err != nil || !ok || f.Reason != messages.ReasonCancelled {
				t.Errorf("the task's last event: %s %s, want it failed, cancelled", last.Type, last.Payload)
			}
		})
	}
}
