package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFlagInEverySpellingIsRead: the configuration file is read whichever
// way the flag package accepts --config: -config=FILE and --config=FILE, or the
// file as the next argument. A file naming a model that does not exist makes the
// node refuse to start, which shows it was read; none of the spellings may start
// the node without it.
func TestConfigFlagInEverySpellingIsRead(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(cfg, []byte(`{"max_steps": -3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, spelling := range [][]string{{"--config=" + cfg}, {"-config=" + cfg}, {"--config", cfg}, {"-config", cfg}} {
		var out, errb bytes.Buffer
		args := append(append([]string{"run"}, spelling...), "--data", filepath.Join(dir, "data"), "--model", "offline", "echo hi")
		code := run(context.Background(), args, &out, &errb, options{})
		if code != 2 || !strings.Contains(errb.String(), "max_steps") {
			t.Errorf("node run %s: exit %d, the file was not read: stdout %q, stderr %q", strings.Join(spelling, " "), code, out.String(), errb.String())
		}
	}
}
