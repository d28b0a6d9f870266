package main

import (
	"strings"
	"testing"
)

// replay show of a fork of a fork names, on each session.forked it holds, the
// session and seq it was forked from: the first fork's, copied, and its own.
// Before, both printed an empty line, and a fork's timeline did not say where
// its history came from.
func TestReplayShowNamesWhereAForkCameFrom(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	if code, _, errs := replay(t, "fork", id, "--at", "2", "--model", "offline", "--session", "f1", "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := replay(t, "fork", "f1", "--at", "3", "--model", "offline", "--session", "f2", "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	for _, args := range [][]string{{"show", "f2", "--data", dir}, {"show", "f2", "--data", dir, "--json"}} {
		code, out, errs := replay(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		for _, want := range []string{"forked from " + id + " at seq 2", "forked from f1 at seq 3"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: no %q in:\n%s", args, want, out)
			}
		}
	}
}
