package node

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The listing's last seq of a session may count events its reads do not return
// (on ClickHouse, a stale owner's hidden events at the end of the log): the
// recovery's read of the session's end reads further back when it finds none
// there, not skipping the session.
func TestWriteAfterRecentEventsReadPastHiddenEvents(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	hw := newHistoryWriter(t, lg, "s")
	hw.tasks(2, 1)
	hw.flush()
	w := &afterTaskWriter{n: &Node{log: lg}}
	events, err := w.recentEvents(ctx, "s", hw.seq+200, 0)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(events)) != hw.seq {
		t.Fatalf("read %d events of the session's %d, its last seq listed 200 past them", len(events), hw.seq)
	}
}

// A session pruned and begun again under the same ID completes its tasks at the
// seqs of the old one's: the key of a turn's Remember (and of the turns this
// process handled) names the task too, so that the new turn is not taken for
// the old one, remembered already.
func TestWriteAfterTaskKeyTellsARecreatedSessionApart(t *testing.T) {
	job := func(task string) afterTaskJob {
		return afterTaskJob{session: "s", completed: messages.Envelope{Seq: 12, CorrelationID: task}}
	}
	if afterTaskKey(job("task-a")) == afterTaskKey(job("task-b")) {
		t.Fatalf("the turns of two tasks completed at seq 12 of session s have one key, %q", afterTaskKey(job("task-a")))
	}
	w := &afterTaskWriter{handled: newBoundedSet(afterTaskHandled)}
	w.markHandled(afterTaskKey(job("task-a")))
	if w.wasHandled(afterTaskKey(job("task-b"))) {
		t.Fatal("the new session's turn is taken for the old one's, handled already")
	}
}
