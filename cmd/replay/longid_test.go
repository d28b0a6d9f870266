package main

import (
	"strings"
	"testing"
)

// A session ID given on the command line is echoed in an error by its head and
// its length, as the node's API echoes one: a 10 KB ID (a mistyped paste, a
// script's bug) was printed whole, 10 KB of stderr for one line.
func TestAnIDTooLongIsEchoedByItsHead(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	long := strings.Repeat("a", 10<<10)
	for _, args := range [][]string{
		{"show", long},
		{"verify", long},
		{"export", long},
		{"export", "notes/" + long},
		{"fork", long, "--at", "1", "--model", "offline"},
		{"fork", "notes/" + long, "--at", "1", "--model", "offline"},
		{"fork", id, "--at", "1", "--model", "offline", "--session", long},
	} {
		code, out, errs := replay(t, append(args, "--data", dir)...)
		if code == 0 || len(out)+len(errs) > 1024 || !strings.Contains(errs, "… (1024") {
			t.Errorf("%s %.20s…: exit %d, %d bytes of stdout, %d of stderr: %.300s", args[0], args[1], code, len(out), len(errs), errs)
		}
	}
}
