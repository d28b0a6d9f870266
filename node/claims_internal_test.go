package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// TestSessionStoreClaims: the session actors' store passes the log's claims
// through its wrappers (the lease of a sharded node, the append timer), so that a
// session that is not running starts its task without reading its log, on a
// sharded node too, where it claims under the node's lease of its partition.
func TestSessionStoreClaims(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	task := func(session string) []messages.Envelope {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor = session+"-task", session, 1, "session"
		return []messages.Envelope{e}
	}

	embedded := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: log, metrics: newMetrics()}
	if _, ok := embedded.sessionStore().(actors.ClaimingStore); !ok {
		t.Fatal("an embedded node's session store does not claim sessions")
	}

	n := &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler),
		Bus: &Bus{Sharded: true, Partition: func(string, int) int { return 0 }}}, log: log, metrics: newMetrics()}
	store, ok := n.sessionStore().(actors.ClaimingStore)
	if !ok {
		t.Fatal("a sharded node's session store does not claim sessions")
	}
	if err := store.Claim(ctx, task("a")); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("claim without a lease: %v, want ErrFenced", err)
	}
	epoch, err := log.Own(ctx, "n1", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	n.own.lease = lease{epoch: epoch, partitions: map[int]bool{0: true}, total: 1}
	if err := store.Claim(ctx, task("a")); err != nil {
		t.Fatalf("claim under the lease: %v", err)
	}
	if err := store.Claim(ctx, task("a")); !errors.Is(err, eventlog.ErrSeqConflict) {
		t.Fatalf("claim of a session with events: %v, want ErrSeqConflict", err)
	}
	if _, err := log.Own(ctx, "n2", []int{0}); err != nil {
		t.Fatal(err)
	}
	if err := store.Claim(ctx, task("b")); !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("claim under a lease taken since: %v, want ErrFenced", err)
	}
}
