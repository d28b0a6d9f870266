package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
)

// A second `node serve --clickhouse` started by mistake on the HTTP address the
// node serving that log already listens on fails at once, and takes nothing:
// the serving node still owns the log, is healthy and takes tasks. Before, the
// second took the log's next ownership epoch in New, failed to listen only
// after, and exited, leaving the serving node refusing every task and write
// (503) until it was restarted.
func TestSecondServeOnTakenPortTakesNoLog(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	if testing.Short() {
		t.Skip("starts node processes")
	}
	db := chtest.Database(t, addr, "troupe_serveport_")
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"done"},{"content":"done"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"TROUPE_CHILD_CLICKHOUSE_DATABASE=" + db}
	first := startChildWith(t, filepath.Join(dir, "a"), script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"), env, "--clickhouse", addr)
	defer first.stop()
	first.post(t, `{"input":"one","session_id":"before"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, os.Args[0], "serve", "--data", filepath.Join(dir, "b", "data"), "--http", first.addr,
		"--model", "scripted:"+script, "--clickhouse", addr)
	second.Env = append(os.Environ(), append([]string{"TROUPE_CRASH_CHILD=1"}, env...)...)
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "address already in use") {
		t.Fatalf("a second serve on a taken address: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "took ownership of the event log") {
		t.Errorf("the second serve, which failed to listen, took the event log:\n%s", out)
	}

	resp, err := http.Get("http://" + first.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the serving node's /healthz after a second serve failed on its address: %d", resp.StatusCode)
	}
	first.post(t, `{"input":"two","session_id":"after"}`) // fails the test unless 202
}
