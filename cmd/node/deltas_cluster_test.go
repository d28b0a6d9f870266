package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunOnAClusterPrintsDeltas: `node run --kafka --stream on` prints the answer's
// text as the cluster's node streams it (its deltas cross troupe.deltas: the run
// announced its watcher to the session's owner before it submitted the task), then
// the answer's step line.
func TestRunOnAClusterPrintsDeltas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","stream_chunk":6,"steps":[{"content":"Twelve times twelve is 144, as streamed."}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	server := startClusterNode(t, env, "n1", "all", script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"))
	waitOwned(t, server)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "--kafka", env.brokers, "--group", env.group, "--topic-prefix", env.prefix,
		"--data", filepath.Join(dir, "run-data"), "--model", "offline", "--stream", "on", "what is 12*12?"}
	if code := run(ctx, args, &out, &errb, options{}); code != 0 {
		t.Fatalf("node run exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	i, j := strings.Index(text, "  │ Twelve times twelve is 144,"), strings.Index(text, "answer: Twelve times twelve is 144, as streamed.")
	if i < 0 || j < i {
		t.Fatalf("node run --kafka did not print the streamed text before the answer:\n%s", text)
	}
}
