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
// which is one argument), rather than only printing the whole usage.
func TestRunSaysWhyItsArgumentsAreWrong(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--data", data, "What is 2+2?", "--model", "offline"}, `flags go before the task: "--model"`},
		{[]string{"run", "--data", data, "--model", "offline", "What is", "2+2?"}, "one task"},
		{[]string{"run", "--data", data, "--model", "offline"}, "no task"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb, options{})
		first, _, _ := strings.Cut(errb.String(), "\n")
		if code != 2 || !strings.HasPrefix(first, "error: ") || !strings.Contains(first, tc.want) {
			t.Errorf("node %s: exit %d, first line %q: want an error saying %q", strings.Join(tc.args, " "), code, first, tc.want)
		}
	}
}
