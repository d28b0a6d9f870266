package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/tools"
)

// nodeTools runs "node tools ARGS..." in dir (the working directory of relative
// paths in the config) and returns its exit code and output.
func nodeTools(t *testing.T, opt options, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"tools"}, args...), &out, &errb, opt)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestToolsList(t *testing.T) {
	t.Chdir(t.TempDir()) // no .troupe.json here
	code, out, errs := nodeTools(t, options{}, "list")
	if code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "\ncalculator  builtin  Evaluates") ||
		!strings.Contains(out, "\nclock       builtin  Returns") || strings.Count(out, "\n") != 3 {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	root := t.TempDir()
	cfg := writeConfig(t, `{"tools": {"http_fetch": {"allow": ["10.0.0.0/8"]}, "files": {"root": "`+filepath.ToSlash(root)+`", "expand": true}}}`)
	code, out, errs = nodeTools(t, options{}, "list", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("list --json: %d %s", code, errs)
	}
	var entries []struct {
		Name        string          `json:"name"`
		Source      string          `json:"source"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		SideEffects bool            `json:"side_effects"`
	}
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("list --json is not JSON: %v\n%s", err, out)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		var schema map[string]any
		if e.Source != "builtin" || e.Description == "" || json.Unmarshal(e.InputSchema, &schema) != nil || schema["type"] != "object" {
			t.Errorf("entry %+v", e)
		}
		if e.SideEffects != (e.Name == "files_write") {
			t.Errorf("%s: side_effects %v", e.Name, e.SideEffects)
		}
	}
	if got := strings.Join(names, " "); got != "calculator clock files_list files_read files_stat files_write http_fetch" {
		t.Errorf("tools: %s", got)
	}
}

func TestToolsCall(t *testing.T) {
	t.Chdir(t.TempDir())
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("from the intranet"))
	}))
	t.Cleanup(page.Close)
	if err := os.Mkdir("work", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `{"tools": {"http_fetch": {"allow": ["127.0.0.1/32"]}, "files": {"root": "work"}}}`)
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	type none struct{}
	extra := options{extraTools: []tools.Tool{
		tools.MustFunc("hangs", "Hangs.", func(context.Context, none) (string, error) { <-hung; return "", nil }, tools.WithTimeout(30*time.Millisecond)),
		tools.MustFunc("floods", "Returns 10 MB.", func(context.Context, none) (string, error) { return strings.Repeat("z", 10<<20), nil }),
	}}
	for _, c := range []struct {
		args     []string
		stdin    string
		code     int
		out, err string
	}{
		{args: []string{"call", "calculator", `{"expression":"6*7"}`}, out: "42\n"},
		{args: []string{"call", "calculator", `expression="2 ^ 10"`}, out: "1024\n"},
		{args: []string{"call", "clock"}, out: ")\n"},
		{args: []string{"call", "calculator", `{"expression":"1/0"}`}, code: 1, err: "error: calculator: invalid arguments: division by zero"},
		{args: []string{"call", "--config", cfg, "files", `{"op":"write","args":{"path":"notes/a.txt","content":"hello"}}`}, out: "wrote 5 bytes to notes/a.txt\n"},
		{args: []string{"call", "files", "--config", cfg, "-"}, stdin: `{"op":"read","args":{"path":"notes/a.txt"}}`, out: "hello\n"},
		{args: []string{"call", "--config", cfg, "files", `{"op":"read","args":{"path":"../troupe.json"}}`}, code: 1, err: "the path leads outside the root"},
		{args: []string{"call", "--config", cfg, "http_fetch", "url=" + page.URL}, out: "\n\nfrom the intranet\n"},
		{args: []string{"call", "--config", cfg, "http_fetch", `{"url":"http://169.254.169.254/"}`}, code: 1, err: "cloud metadata address"},
		{args: []string{"call", "--config", cfg, "http_fetch", `{"url":"http://example.com","method":"DELETE"}`}, code: 1, err: `"method" must be one of "GET", "HEAD"`},
		{args: []string{"call", "hangs"}, code: 1, err: "error: tool timed out after 30ms"},
		{args: []string{"call", "floods"}, out: "\n[truncated: 10485760 bytes, showing the first 65536]\n"},
		{args: []string{"call", "nope"}, code: 2, err: `no tool "nope"; the tools are: calculator, clock, floods, hangs`},
		{args: []string{"call"}, code: 2, err: "usage:"},
		{args: []string{"call", "calculator", "{}", "extra"}, code: 2, err: "usage:"},
		{args: []string{"call", "calculator", "not pairs"}, code: 2, err: "neither a JSON object nor key=value pairs"},
		{args: []string{"list", "extra"}, code: 2, err: "usage:"},
		{args: []string{"frob"}, code: 2, err: "usage:"},
		{args: []string{}, code: 2, err: "usage:"},
		{args: []string{"list", "--bogus"}, code: 2, err: "flag provided but not defined"},
	} {
		opt := extra
		opt.stdin = strings.NewReader(c.stdin)
		code, out, errs := nodeTools(t, opt, c.args...)
		if code != c.code || !strings.HasSuffix(out, c.out) || !strings.Contains(errs, c.err) || (c.code == 0 && errs != "") {
			t.Errorf("tools %q: exit %d\nstdout %.300q\nstderr %.300q\nwant exit %d, stdout ending %q, stderr with %q", c.args, code, out, errs, c.code, c.out, c.err)
		}
	}
}

// The tools section of the configuration file is checked like the rest of it.
func TestToolsConfigIsValidated(t *testing.T) {
	t.Chdir(t.TempDir())
	for body, want := range map[string]string{
		`{"tools": {"http_fetch": {"allow": ["10.0.0.0/33"]}}}`:  `tools.http_fetch.allow: allow entry "10.0.0.0/33"`,
		`{"tools": {"http_fetch": {"timeout": "forever"}}}`:      `tools.http_fetch.timeout: "forever" is not a duration`,
		`{"tools": {"http_fetch": {"max_bytes": -1}}}`:           `tools.http_fetch.max_bytes: -1 is out of range`,
		`{"tools": {"http_fetch": {"alow": []}}}`:                `unknown field "tools.http_fetch.alow": its fields are allow, max_bytes, timeout`,
		`{"tools": {"shell": {}}}`:                               `unknown field "tools.shell": the tools are http_fetch, files`,
		`{"tools": {"files": {}}}`:                               `tools.files.root: "" is not a usable directory path`,
		`{"tools": {"files": {"root": "missing-dir"}}}`:          `tools.files: tools: files: root "missing-dir"`,
		`{"tools": {"files": {"root": "w", "max_bytes": 1e12}}}`: `tools.files.max_bytes`,
	} {
		code, out, errs := nodeTools(t, options{}, "list", "--config", writeConfig(t, body))
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d %s%s; want 2 with %q", body, code, out, errs, want)
		}
	}
	// run and serve read the same section.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", writeConfig(t, `{"tools": {"files": {"root": "missing-dir"}}}`), "--model", "offline", "1+1"}, &out, &errb, options{}); code != 2 ||
		!strings.Contains(errb.String(), `root "missing-dir"`) {
		t.Errorf("run with a missing files root: %d %s", code, errb.String())
	}
}

func TestToolsListShowsA2AAgents(t *testing.T) {
	t.Chdir(t.TempDir())
	// The card is fetched at the first call, not to list the tool (nothing listens
	// on port 1).
	cfg := writeConfig(t, `{"a2a_agents": {"remote": "http://127.0.0.1:1/.well-known/agent-card.json"}}`)
	code, out, errs := nodeTools(t, options{}, "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "\na2a__remote ") || !strings.Contains(out, "remote A2A agent") {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	code, out, errs = nodeTools(t, options{}, "call", "a2a__remote", `{"message": "hi"}`, "--config", cfg)
	if code == 0 || !strings.Contains(out+errs, "remote agent remote is unreachable") {
		t.Fatalf("call of an unreachable agent: %d\n%s%s", code, out, errs)
	}
	bad := writeConfig(t, `{"a2a_agents": {"no spaces": "https://x.invalid/card.json"}}`)
	if code, _, errs := nodeTools(t, options{}, "list", "--config", bad); code != 2 || !strings.Contains(errs, "a2a_agents") {
		t.Fatalf("bad name: %d %s", code, errs)
	}
}

// With the notes enabled, listing the tools and calling one that is not the notes'
// work while a node holds the data directory (its log locked); a call that reaches
// the notes, directly or through a chain, says the directory is held.
func TestToolsListAndCallWhileANodeHoldsTheNotesLog(t *testing.T) {
	t.Chdir(t.TempDir())
	data := t.TempDir()
	held, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeConfig(t, `{"tools": {"notes": {}}, "chains": [{"name": "jot", "description": "Adds a note.",
		"steps": [{"name": "add", "tool": "notes", "args": "{\"op\": \"add\", \"args\": {\"type\": \"fact\", \"body\": \"b\"}}"}]},
		{"name": "twice", "description": "Doubles.", "steps": [{"name": "a", "tool": "calculator", "args": "{\"expression\": \"2 * 21\"}"}]}]}`)
	code, out, errs := nodeTools(t, options{}, "list", "--config", cfg, "--data", data)
	if code != 0 || !strings.Contains(out, "\nnotes ") || !strings.Contains(out, "\njot ") {
		t.Fatalf("list while the log is held: %d\n%s%s", code, out, errs)
	}
	for _, args := range [][]string{{"calculator", "expression=6*7"}, {"twice"}} {
		code, out, errs = nodeTools(t, options{}, append([]string{"call", "--config", cfg, "--data", data}, args...)...)
		if code != 0 || out != "42\n" {
			t.Errorf("call %s while the log is held: %d %q %s", args[0], code, out, errs)
		}
	}
	for _, args := range [][]string{{"notes", `{"op": "list"}`}, {"jot"}} {
		code, _, errs = nodeTools(t, options{}, append([]string{"call", "--config", cfg, "--data", data}, args...)...)
		if code != 1 || !strings.Contains(errs, "locked by another process") {
			t.Errorf("call %s while the log is held: %d %s; want exit 1 saying the directory is locked", args[0], code, errs)
		}
	}
}

// Listing the tools of a node with the memory tool and the rag tool opens no data
// directory: in a fresh empty directory it creates none, and with a --data that
// cannot be one (under a file) it lists them all the same, as does a call of
// another tool. A call of the memory tool opens it, and says so when it cannot.
func TestToolsListWithMemoryAndRAGNeedsNoDataDirectory(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_CLICKHOUSE", "")
	t.Setenv("TROUPE_DATA", "")
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := writeConfig(t, `{"memory": {"tool": true}, "knowledge": {"tool": true, "default": "handbook"}}`)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]string{nil, {"--data", filepath.Join(file, "data")}} {
		code, out, errs := nodeTools(t, options{}, append([]string{"list", "--config", cfg}, data...)...)
		if code != 0 || !strings.Contains(out, "\nmemory ") || !strings.Contains(out, "\nrag ") {
			t.Fatalf("list %v: %d\n%s%s", data, code, out, errs)
		}
		if code, out, errs := nodeTools(t, options{}, append([]string{"call", "--config", cfg, "calculator", "expression=2+3"}, data...)...); code != 0 || strings.TrimSpace(out) != "5" {
			t.Fatalf("call calculator %v: %d %q %s", data, code, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".troupe")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("listing the tools made the data directory .troupe: %v", err)
	}
	code, _, errs := nodeTools(t, options{}, "call", "--config", cfg, "--data", filepath.Join(file, "data"), "memory", `{"op": "stats"}`)
	if code != 1 || !strings.Contains(errs, "the memories of "+filepath.Join(file, "data")) {
		t.Fatalf("call memory on a data directory under a file: %d %s", code, errs)
	}
	data := filepath.Join(t.TempDir(), "data")
	if code, out, errs := nodeTools(t, options{}, "call", "--config", cfg, "--data", data, "memory",
		`{"op": "add", "args": {"tier": "semantic", "content": "Alice likes tea", "importance": 0.5}}`); code != 0 || !strings.Contains(out, `"event":"ADD"`) {
		t.Fatalf("call memory: %d %q %s", code, out, errs)
	}
}
