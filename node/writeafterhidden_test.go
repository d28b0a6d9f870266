package node

import (
	"context"
	"testing"
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
