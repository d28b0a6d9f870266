package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The notes tool works from the command line on the data directory's log: a note
// added by one "node tools call" is listed and found by the next, and a node run on
// that directory with the notes enabled works beside the stream and keeps it.
func TestNotesThroughTheCLI(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_CLICKHOUSE", "")
	t.Chdir(t.TempDir())
	data := filepath.Join(t.TempDir(), "data")
	cfg := writeConfig(t, `{"tools": {"notes": {"max_tags": 4}}}`)
	expanded := writeConfig(t, `{"tools": {"notes": {"expand": true}}}`)
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"list", "--config", cfg}, out: "\nnotes       builtin  The agent's own notes"},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"add","args":{"type":"todo","tags":["cli"],"body":"Ship the notes."}}`},
			out: `"id":"n1","type":"todo","tags":["cli"],"body":"Ship the notes."`},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"add","args":{"body":"Second."}}`}, out: `"id":"n2"`},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", "op=list"}, out: `"matched":2`},
		{args: []string{"call", "--config", expanded, "--data", data, "notes_search", "query=ship"}, out: `"body":"Ship the notes.","created"`},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"update","args":{"id":"n2","tags":["a","b","c","d","e"]}}`}, code: 1,
			err: "5 tags; a note has at most 4"},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"remove","args":{"id":"n1"}}`}, out: `{"removed":"n1"}`},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"remove","args":{"id":"n1"}}`}, code: 1, err: `no note has the id "n1"`},
		{args: []string{"call", "--config", expanded, "--data", data, "notes_list"}, out: `"matched":1`},
	} {
		code, out, errs := nodeTools(t, options{}, c.args...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.err) {
			t.Errorf("tools %s: exit %d\nstdout %s\nstderr %s\nwant exit %d, stdout with %q, stderr with %q", strings.Join(c.args, " "), code, out, errs, c.code, c.out, c.err)
		}
	}

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", cfg, "--data", data, "--model", "offline", "-v", "hello"}, &out, &errb, options{})
	if code != 0 || strings.Contains(errb.String(), "notes/") {
		t.Errorf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if code, out, _ := nodeTools(t, options{}, "call", "--config", cfg, "--data", data, "notes", "op=list"); code != 0 || !strings.Contains(out, "Second.") {
		t.Errorf("after the run, list: exit %d %s", code, out)
	}
}

// The notes section is checked when the file is read: a bad value stops the node
// (exit 2) naming the field; "enabled": false leaves the tool out.
func TestNotesConfigIsValidated(t *testing.T) {
	clearLLMEnv(t)
	t.Chdir(t.TempDir())
	for _, c := range []struct{ body, want string }{
		{`{"tools": {"notes": {"max_body_bytes": -1}}}`, "tools.notes.max_body_bytes: -1 is out of range: want 1 to 1048576"},
		{`{"tools": {"notes": {"max_tags": 1000}}}`, "tools.notes.max_tags: 1000 is out of range"},
		{`{"tools": {"notes": {"max_notes": 2000000}}}`, "tools.notes.max_notes: 2000000 is out of range"},
		{`{"tools": {"notes": {"max_notes": "many"}}}`, "max_notes"},
		{`{"tools": {"notes": {"max_note": 5}}}`, `unknown field "tools.notes.max_note"`},
		{`{"tools": {"notes": {"enabled": "yes"}}}`, "enabled"},
	} {
		cfg := writeConfig(t, c.body)
		for _, args := range [][]string{{"tools", "list", "--config", cfg}, {"run", "--config", cfg, "--data", t.TempDir(), "--model", "offline", "hi"}} {
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("%s with %s: exit %d, stderr %q; want 2 saying %q", args[0], c.body, code, errb.String(), c.want)
			}
		}
	}
	code, out, errs := nodeTools(t, options{}, "list", "--config", writeConfig(t, `{"tools": {"notes": {"enabled": false}}}`))
	if code != 0 || strings.Contains(out, "notes") {
		t.Errorf("enabled false: exit %d\n%s%s", code, out, errs)
	}
}
