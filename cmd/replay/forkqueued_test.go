package main

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A fork cut while a task waits behind the running one continues both: replay
// fork follows the fork until every unfinished task of it ended (and --input's),
// not only the first, before it stops its node.
func TestForkFollowsTheQueuedTasks(t *testing.T) {
	dir := t.TempDir()
	appendSession(t, dir, "two",
		&messages.TaskSubmitted{Input: "echo one"},
		&messages.TaskSubmitted{Input: "echo two"})
	code, out, errs := replay(t, "fork", "two", "--at", "2", "--session", "f", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: one") || !strings.Contains(out, "answer: two") {
		t.Errorf("fork with a queued task: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = replay(t, "fork", "two", "--at", "2", "--session", "g", "--input", "echo three", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: two") || !strings.Contains(out, "answer: three") {
		t.Errorf("fork with a queued task and --input: %d\n%s\n%s", code, out, errs)
	}
}
