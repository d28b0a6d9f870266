//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestImportFromStdinTerminatedRemovesItsFile: replay import - stopped by
// SIGTERM (kill, a service manager) while it reads stdin ends as on an error,
// its temporary file removed, where it died leaving it.
func TestImportFromStdinTerminatedRemovesItsFile(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "import", "-", "--data", t.TempDir())
	cmd.Env = append(os.Environ(), replayChildEnv+"=1", "TMPDIR="+tmp)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte(`{"format": "troupe.session",` + "\n")); err != nil {
		t.Fatal(err)
	}
	// Once it spools stdin (its temporary file made, after its signals are taken).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if entries, err := os.ReadDir(tmp); err != nil {
			t.Fatal(err)
		} else if len(entries) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay import - made no temporary file within 30 s: %s", errb.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("replay import - terminated: exit %d (%v), want 1\n%s%s", code, cmd.ProcessState, out.String(), errb.String())
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Fatalf("replay import - terminated left %d temporary files (%v)", len(entries), err)
	}
}
