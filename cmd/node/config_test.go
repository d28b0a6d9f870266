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

func TestIdleTimeoutIsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"0s", "-5s", "soon", "10"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", dir, "--idle-timeout", v}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "--idle-timeout") {
			t.Errorf("--idle-timeout %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	cfg := filepath.Join(dir, "node.json")
	if err := os.WriteFile(cfg, []byte(`{"idle_timeout":"-1m"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", dir, "--config", cfg}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), `"-1m"`) {
		t.Errorf("idle_timeout -1m in the file: exit %d, stderr %q", code, stderr.String())
	}
	for in, want := range map[string]time.Duration{"": 0, "90s": 90 * time.Second, "5m": 5 * time.Minute, "250ms": 250 * time.Millisecond} {
		if got, err := parseIdleTimeout(in); err != nil || got != want {
			t.Errorf("parseIdleTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
