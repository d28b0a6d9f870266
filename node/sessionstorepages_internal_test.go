package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// pageCounted is a log counting its paged reads (ReadN) and whole reads (Read).
type pageCounted struct {
	*sqlite.Log
	pages, wholes int
}

func (l *pageCounted) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	l.pages++
	return l.Log.ReadN(ctx, id, from, n, maxBytes)
}

func (l *pageCounted) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	l.wholes++
	return l.Log.Read(ctx, id, from)
}

// TestSessionStoreReadsPages: the session actors' store passes the log's paged
// reads (eventlog.PageReader) through its wrappers, the lease of a sharded node
// and the append timer, so that a session actor's bounded read of its log (the
// event at a fold snapshot's seq) reads that page, not the rest of the session,
// on a node of a cluster too; the store's appends still take the lease.
func TestSessionStoreReadsPages(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	log := &pageCounted{Log: raw}
	events := make([]messages.Envelope, 20)
	for i := range events {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor = "t"+string(rune('a'+i)), "s", uint64(i+1), "session"
		events[i] = e
	}
	if err := raw.Append(ctx, events); err != nil {
		t.Fatal(err)
	}

	embedded := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: log, metrics: newMetrics()}
	sharded := &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler),
		Bus: &Bus{Sharded: true, Partition: func(string, int) int { return 0 }}}, log: log, metrics: newMetrics()}
	for name, n := range map[string]*Node{"embedded": embedded, "sharded": sharded} {
		store := n.sessionStore()
		pr, ok := store.(eventlog.PageReader)
		if !ok {
			t.Fatalf("%s: the session store (%T) does not read pages", name, store)
		}
		log.pages, log.wholes = 0, 0
		page, err := pr.ReadN(ctx, "s", 5, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 3 || page[0].Seq != 5 || page[2].Seq != 7 {
			t.Fatalf("%s: ReadN(5, 3) read %d events", name, len(page))
		}
		if log.pages != 1 || log.wholes != 0 {
			t.Fatalf("%s: ReadN made %d paged and %d whole reads of the log, want 1 and 0", name, log.pages, log.wholes)
		}
	}

	// The lease is still taken by the sharded store's appends.
	next := events[len(events)-1]
	next.ID, next.Seq = "next", next.Seq+1
	if err := sharded.sessionStore().Append(ctx, []messages.Envelope{next}); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("append without a lease: %v, want ErrFenced", err)
	}
	epoch, err := raw.Own(ctx, "n1", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	sharded.own.lease = lease{epoch: epoch, partitions: map[int]bool{0: true}, total: 1}
	if err := sharded.sessionStore().Append(ctx, []messages.Envelope{next}); err != nil {
		t.Fatalf("append under the lease: %v", err)
	}
}
