package sqlite

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// epochEntries returns the entries index events_by_epoch_start holds for a
// session: the seqs of its leased events whose epoch_start is set.
func epochEntries(ctx context.Context, t *testing.T, l *Log, session string) []uint64 {
	t.Helper()
	rows, err := l.rdb.QueryContext(ctx, `SELECT seq FROM events INDEXED BY events_by_epoch_start
		WHERE session_id = ? AND `+epochStartWhere+` ORDER BY seq`, session)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []uint64
	for rows.Next() {
		var seq uint64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// readSeqs returns the seqs Read returns of session from fromSeq.
func readSeqs(ctx context.Context, t *testing.T, l *Log, session string, fromSeq uint64) []uint64 {
	t.Helper()
	events, err := l.Read(ctx, session, fromSeq)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range events {
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

// ownOne takes partition p for node and returns the lease.
func ownOne(ctx context.Context, t *testing.T, l *Log, node string, p int) eventlog.Lease {
	t.Helper()
	epoch, err := l.Own(ctx, node, []int{p})
	if err != nil {
		t.Fatal(err)
	}
	return eventlog.Lease{Partition: p, Epoch: epoch}
}

// TestEpochIndexHoldsEpochStarts: an owner's events of a session, appended as
// a node appends them (claimed, then in batches), cost the epoch index one entry,
// not one each; the next owner's, one more.
func TestEpochIndexHoldsEpochStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := openTemp(ctx, t)
	events := make([]messages.Envelope, 10)
	for i := range events {
		events[i] = testEvent(t, "s", uint64(i+1), "session")
	}
	a := ownOne(ctx, t, l, "node-a", 0)
	if err := l.ClaimLeased(ctx, a, events[:2]); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 8; i += 2 {
		if err := l.AppendLeased(ctx, a, events[i:i+2]); err != nil {
			t.Fatal(err)
		}
	}
	if got := epochEntries(ctx, t, l, "s"); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("after one owner's 8 events, the epoch index holds seqs %v, want [1]", got)
	}
	b := ownOne(ctx, t, l, "node-b", 0)
	if err := l.AppendLeased(ctx, b, events[8:]); err != nil {
		t.Fatal(err)
	}
	if got := epochEntries(ctx, t, l, "s"); !slices.Equal(got, []uint64{1, 9}) {
		t.Fatalf("after the next owner's, the epoch index holds seqs %v, want [1 9]", got)
	}
	if got := readSeqs(ctx, t, l, "s", 10); !slices.Equal(got, []uint64{10}) {
		t.Fatalf("Read from seq 10: seqs %v, want [10]", got)
	}
}

// TestEpochStartAfterAnotherEpoch: an event whose seq follows an event of another
// epoch starts a run in the epoch index, also when the batch that writes it
// brings the event before it again (stored by the other owner, so not written),
// or when the writer committed that event itself just before. Otherwise the
// highest epoch before a later seq would be missed, and Read from that seq would
// not hide a stale owner's event there. Owner A holds partition 0 under epoch 1,
// owner B partition 1 under epoch 2, and both write session s, as a stale owner
// of its partition may.
func TestEpochStartAfterAnotherEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name string
		b    []uint64 // the seqs B appends, in one batch, after A appended 1 and 2
	}{
		{"Redelivered", []uint64{2, 3}},
		{"Committed", []uint64{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := openTemp(ctx, t)
			ev := func(seq uint64) messages.Envelope { return testEvent(t, "s", seq, "session") }
			a, b := ownOne(ctx, t, l, "node-a", 0), ownOne(ctx, t, l, "node-b", 1)
			if err := l.AppendLeased(ctx, a, []messages.Envelope{ev(1), ev(2)}); err != nil {
				t.Fatal(err)
			}
			var batch []messages.Envelope
			for _, seq := range c.b {
				batch = append(batch, ev(seq))
			}
			if err := l.AppendLeased(ctx, b, batch); err != nil {
				t.Fatal(err)
			}
			if err := l.AppendLeased(ctx, a, []messages.Envelope{ev(4)}); err != nil {
				t.Fatal(err)
			}
			if got := readSeqs(ctx, t, l, "s", 0); !slices.Equal(got, []uint64{1, 2, 3}) {
				t.Errorf("Read from seq 0: seqs %v, want [1 2 3] (seq 4 of epoch 1 hidden)", got)
			}
			if got := readSeqs(ctx, t, l, "s", 4); len(got) != 0 {
				t.Errorf("Read from seq 4: seqs %v, want none (epoch 2 before it)", got)
			}
			if got := epochEntries(ctx, t, l, "s"); !slices.Equal(got, []uint64{1, 3, 4}) {
				t.Errorf("the epoch index holds seqs %v, want [1 3 4]", got)
			}
		})
	}
}

// TestEpochStartAfterUndoneBatch: a leased batch that a group's transaction undoes
// (its savepoint rolled back, the others committed) leaves nothing the writer
// takes as stored: the next event of its session starts a run in the epoch index,
// so that a stale owner's event after it is hidden from Read as it should be.
func TestEpochStartAfterUndoneBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	h := &heldWriter{t: t}
	l, err := open(ctx, Config{Dir: t.TempDir()}, h.hook)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ev := func(seq uint64) messages.Envelope { return testEvent(t, "s", seq, "session") }
	a, b := ownOne(ctx, t, l, "node-a", 0), ownOne(ctx, t, l, "node-b", 1)
	if err := l.AppendLeased(ctx, a, []messages.Envelope{ev(1), ev(2)}); err != nil {
		t.Fatal(err)
	}
	// In one group: B's seq 3 with another event at the taken seq 2 (refused,
	// undone), and an unrelated batch (committed).
	conflicting := ev(2)
	conflicting.ID += "-other"
	release := h.hold()
	first := make(chan error, 1)
	go func() { first <- l.Append(ctx, []messages.Envelope{testEvent(t, "first", 1, "session")}) }()
	h.waitHeld()
	undone, other := make(chan error, 1), make(chan error, 1)
	go func() { undone <- l.AppendLeased(ctx, b, []messages.Envelope{ev(3), conflicting}) }()
	waitQueued(t, l, 1)
	go func() { other <- l.Append(ctx, []messages.Envelope{testEvent(t, "other", 1, "session")}) }()
	waitQueued(t, l, 2)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-undone; !errors.Is(err, eventlog.ErrSeqConflict) {
		t.Fatalf("B's batch with a taken seq: %v, want %v", err, eventlog.ErrSeqConflict)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	// B goes on at seq 4 (a seq 3 of its own lost), then A, stale, writes seq 5.
	if err := l.AppendLeased(ctx, b, []messages.Envelope{ev(4)}); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendLeased(ctx, a, []messages.Envelope{ev(5)}); err != nil {
		t.Fatal(err)
	}
	if got := readSeqs(ctx, t, l, "s", 0); !slices.Equal(got, []uint64{1, 2, 4}) {
		t.Errorf("Read from seq 0: seqs %v, want [1 2 4]", got)
	}
	if got := readSeqs(ctx, t, l, "s", 5); len(got) != 0 {
		t.Errorf("Read from seq 5: seqs %v, want none (epoch 2 at seq 4 before it)", got)
	}
}
