//go:build unix

package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPWithoutTokensFileKeepsServing: node serve takes SIGHUP as a reload
// (of its tokens file) and never dies of it: a node without a tokens file that gets
// one (systemctl reload, a logrotate script), or a hundred at once, goes on serving,
// says that it had nothing to reload, and stops gracefully on SIGTERM, exit 0.
// Before, Go's default action ended it at once, with no graceful stop: calls in
// flight were cut and performed again when their tasks resumed.
func TestSIGHUPWithoutTokensFileKeepsServing(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--data", filepath.Join(dir, "data"), "--http", addr, "--model", "offline")
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+filepath.Join(dir, "records"), "TROUPE_MODEL_LOG="+filepath.Join(dir, "models"))
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	healthy := func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(30 * time.Second)
	for !healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("node did not come up\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 100 {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatalf("SIGHUP: %v", err)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "nothing to reload") {
		select {
		case err := <-exited:
			t.Fatalf("node serve ended on SIGHUP: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("node serve did not log the SIGHUP\n%s", stderr.String())
		}
	}
	if !healthy() {
		t.Fatalf("node serve not healthy after SIGHUP\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("node serve exited %v on SIGTERM\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("node serve did not stop on SIGTERM\n%s", stderr.String())
	}
}
