package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunSaysWhyItsArgumentsAreWrong: node run with flags after its task, or with
// no task, or two, says what is wrong in one line (the flags go before the task,
// which is one argument), rather than only printing the whole usage; so do an
// unknown command, a bad flag and node serve or mcp given an argument. The error is
// followed by the commands only, not the 170 lines of flags it would scroll away
// above (node --help lists them).
func TestRunSaysWhyItsArgumentsAreWrong(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--data", data, "What is 2+2?", "--model", "offline"}, `flags go before the task: "--model"`},
		{[]string{"run", "--data", data, "--model", "offline", "What is", "2+2?"}, "one task"},
		{[]string{"run", "--data", data, "--model", "offline"}, "no task"},
		{[]string{"sevre", "--data", data}, `unknown command "sevre"`},
		{[]string{"serve", "--data", data, "extra", "--http", "127.0.0.1:0"}, `node serve takes no arguments, got "extra" (so the flags after it, from "--http", were not read)`},
		{[]string{"mcp", "--data", data, "extra"}, `node mcp takes no arguments, got ["extra"]`},
		{[]string{"run", "--data", data, "--max-step", "3", "What is 2+2?"}, "node run: flag provided but not defined: -max-step"},
		{[]string{"serve", "--data", data, "--max-sessions", "many"}, `node serve: invalid value "many" for flag -max-sessions`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb, options{})
		first, _, _ := strings.Cut(errb.String(), "\n")
		if code != 2 || !strings.HasPrefix(first, "error: ") || !strings.Contains(first, tc.want) {
			t.Errorf("node %s: exit %d, first line %q: want an error saying %q", strings.Join(tc.args, " "), code, first, tc.want)
		}
		if !strings.Contains(errb.String(), "usage:") || strings.Contains(errb.String(), "--milvus-prefix") {
			t.Errorf("node %s: want the commands after the error, not every flag:\n%s", strings.Join(tc.args, " "), errb.String())
		}
	}
}
