package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFromAPipeIsReadOnce: a configuration given as a pipe, as a shell's
// process substitution gives it (node serve --config <(sops -d node.json), so that
// its secrets are never on disk), can be read once only: the node reads it once, its
// "llm" section included, and runs with it.
func TestConfigFromAPipeIsReadOnce(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString(`{"model": "offline", "max_steps": 3, "llm": {"timeout": "45s"}}`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", fmt.Sprintf("/dev/fd/%d", r.Fd()),
		"--data", filepath.Join(t.TempDir(), "data"), "echo hi"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: hi") {
		t.Fatalf("exit %d: stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
