package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogFormatJSON: with --log-format json (or TROUPE_LOG_FORMAT, or the file's
// "log_format"), every line the node logs on stderr is one JSON object a log
// collector can read, with its time, level and message; text stays the default.
func TestLogFormatJSON(t *testing.T) {
	check := func(t *testing.T, args []string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(context.Background(), append(append([]string{"run", "-v", "--data", t.TempDir(), "--model", "offline"}, args...), "echo hi"), &out, &errb, options{})
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if len(lines) == 0 || lines[0] == "" {
			t.Fatal("the node logged nothing at debug level")
		}
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("a log line is not JSON (%v): %s", err, line)
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := rec[k]; !ok {
					t.Fatalf("a log line has no %q: %s", k, line)
				}
			}
		}
	}
	t.Run("flag", func(t *testing.T) { check(t, []string{"--log-format", "json"}) })
	t.Run("env", func(t *testing.T) {
		t.Setenv("TROUPE_LOG_FORMAT", "json")
		check(t, nil)
	})
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(`{"log_format": "json"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		check(t, []string{"--config", path})
	})
	t.Run("text by default", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"run", "-v", "--data", t.TempDir(), "--model", "offline", "echo hi"}, &out, &errb, options{}); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if !strings.HasPrefix(errb.String(), "time=") {
			t.Fatalf("the default log is not text:\n%s", errb.String())
		}
	})
}

// TestLogFormatRefused: an unknown format stops the node before it starts, saying
// which formats there are.
func TestLogFormatRefused(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--log-format", "yaml", "echo hi"}, &out, &errb, options{})
	if code != 2 || !strings.Contains(errb.String(), `--log-format "yaml": want text or json`) {
		t.Fatalf("exit %d, want 2 and the formats named: %s", code, errb.String())
	}
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, []byte(`{"log_format": "logfmt"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--config", path, "echo hi"}, &out, &errb, options{})
	if code != 2 || !strings.Contains(errb.String(), "log_format") {
		t.Fatalf("exit %d, want 2 and the key named: %s", code, errb.String())
	}
}

// --decision-rules (TROUPE_DECISION_RULES, "decision_rules") pins the rules new
// tasks are recorded under; a version the build does not have stops the node,
// naming the versions it has.
func TestDecisionRulesFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--decision-rules", "8", "echo hi"}, &out, &errb, options{}); code != 0 {
		t.Fatalf("--decision-rules 8: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--decision-rules", "99", "echo hi"}, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), "decision rules 99") {
		t.Fatalf("--decision-rules 99: exit %d, want 2: %s", code, errb.String())
	}
	errb.Reset()
	t.Setenv("TROUPE_DECISION_RULES", "x")
	if code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "echo hi"}, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), "TROUPE_DECISION_RULES") {
		t.Fatalf("TROUPE_DECISION_RULES=x: exit %d, want 2: %s", code, errb.String())
	}
	t.Setenv("TROUPE_DECISION_RULES", "")
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, []byte(`{"decision_rules": 1000}`), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--config", path, "echo hi"}, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), "decision_rules") {
		t.Fatalf(`"decision_rules": 1000: exit %d, want 2: %s`, code, errb.String())
	}
}
