package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// pagesCounted is a SQLite log that counts the pages read of its sessions.
type pagesCounted struct {
	*sqlite.Log
	pages atomic.Int64
}

func (l *pagesCounted) ReadN(ctx context.Context, session string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	l.pages.Add(1)
	return l.Log.ReadN(ctx, session, from, n, maxBytes)
}

func (l *pagesCounted) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	l.pages.Add(1)
	return l.Log.Read(ctx, session, from)
}

// A task sent again under the ID of an event deep in a long session is found by
// its ID, in one read of the event, where the log finds events so (SQLite):
// before, checkRedelivery read the session 512 events at a time up to it.
func TestCheckRedeliveryFindsTheTaskByItsID(t *testing.T) {
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	const session, n = "long", 3000
	var events []messages.Envelope
	for seq := uint64(1); seq <= n; seq++ {
		var p messages.Payload = &messages.TaskSubmitted{Input: fmt.Sprintf("task %d", seq)}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seq), session, seq, int64(seq), "ingress"
		if seq == n-1 {
			e.ID = "rec-0199a3c4"
		}
		events = append(events, e)
	}
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	counted := &pagesCounted{Log: lg}
	nd := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: counted}
	var _ eventlog.Log = counted

	sent := events[n-2] // the same task again: a redelivery
	if named, err := nd.checkRedelivery(ctx, sent); err != nil || named.ID != "" {
		t.Fatalf("a redelivery: %+v, %v", named, err)
	}
	other, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "another task"})
	if err != nil {
		t.Fatal(err)
	}
	other.ID, other.SessionID = sent.ID, session
	if _, err := nd.checkRedelivery(ctx, other); err == nil {
		t.Fatal("another task under a recorded task's ID was taken for a redelivery")
	}
	if got := counted.pages.Load(); got > 2 {
		t.Errorf("the two checks read %d pages of the session, want one read of the event each", got)
	}
}

// A task sent again that the session recorded deeper than it was sent (the
// session stamps its depth on a later task) is the same task: only one
// recorded shallower than it was sent differs.
func TestTaskDifferencesOfAStampedDepth(t *testing.T) {
	sent := &messages.TaskSubmitted{Input: "again"}
	recorded := &messages.TaskSubmitted{Input: "again", Depth: 3}
	if d := taskDifferences(recorded, sent); len(d) != 0 {
		t.Errorf("a task recorded with its session's depth differs: %v", d)
	}
	if d := taskDifferences(&messages.TaskSubmitted{Input: "again", Depth: 1}, &messages.TaskSubmitted{Input: "again", Depth: 3}); len(d) != 1 {
		t.Errorf("a task recorded shallower than sent: %v, want the depth", d)
	}
}
