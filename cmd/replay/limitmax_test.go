package main

import (
	"strconv"
	"strings"
	"testing"
)

// list --limit N asks the log for N+1 sessions, to say when it cut the list; the
// largest N lists every session rather than overflowing into a negative limit.
func TestListWithTheLargestLimit(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 1+1?")
	code, out, errs := replay(t, "list", "--data", dir, "--limit", strconv.Itoa(int(^uint(0)>>1)))
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("list --limit MaxInt: %d %q %q", code, out, errs)
	}
}
