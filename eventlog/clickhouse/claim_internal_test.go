package clickhouse

import (
	"errors"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestDecideClaims decides claims against stored events, without a server: a
// claim of a session with any stored event is refused, the second of two claims
// of one session in a group is refused, and a retried claim (after an INSERT
// whose outcome was unknown) is taken for its own earlier write only when the
// session holds exactly its events, under its epoch.
func TestDecideClaims(t *testing.T) {
	event := func(session string, seq uint64) messages.Envelope {
		return messages.Envelope{ID: fmt.Sprintf("%s/%d", session, seq), SessionID: session, Seq: seq, Type: messages.TypeTaskSubmitted, Payload: []byte(`{}`)}
	}
	claimOf := func(lease *eventlog.Lease, events ...messages.Envelope) *appendReq {
		return &appendReq{lease: lease, claim: true, events: events, payloads: make([]string, len(events))}
	}
	stored := func(epoch uint64, events ...messages.Envelope) *storedEvents {
		s := &storedEvents{at: map[position][]storedRow{}, where: map[string][]storedRow{}, indexed: map[idAt]bool{},
			current: map[int]uint64{0: 7}, sessions: map[string]sessionTop{}}
		var claims []claim
		for _, e := range events {
			claims = append(claims, claim{position{e.SessionID, e.Seq}, e.ID, epoch})
		}
		s.add(claims)
		return s
	}
	lease := &eventlog.Lease{Partition: 0, Epoch: 7}
	batch := []messages.Envelope{event("s", 1), event("s", 2)}
	for _, tc := range []struct {
		name   string
		stored *storedEvents
		retry  bool
		want   error
	}{
		{"new session", stored(7), false, nil},
		{"its very events", stored(7, batch...), false, eventlog.ErrSeqConflict},
		{"its very events, retried", stored(7, batch...), true, nil},
		{"its events and more, retried", stored(7, append(batch, event("s", 3))...), true, eventlog.ErrSeqConflict},
		{"part of its events, retried", stored(7, batch[0]), true, eventlog.ErrSeqConflict},
		{"a previous owner's very events, retried", stored(6, batch...), true, eventlog.ErrSeqConflict},
		{"a later owner's event", stored(8, event("s", 5)), false, eventlog.ErrFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide([]*appendReq{claimOf(lease, batch...)}, tc.stored, tc.retry)
			if !errors.Is(d.errs[0], tc.want) || (tc.want == nil && d.errs[0] != nil) {
				t.Fatalf("decided %v, want %v", d.errs[0], tc.want)
			}
			if tc.want == nil && len(d.rows) != len(batch) {
				t.Fatalf("%d rows to insert, want %d", len(d.rows), len(batch))
			}
		})
	}
	// Two claims of one session in one group: the first is written.
	d := decide([]*appendReq{claimOf(lease, batch...), claimOf(lease, event("s", 1))}, stored(7), false)
	if d.errs[0] != nil || !errors.Is(d.errs[1], eventlog.ErrSeqConflict) || len(d.rows) != len(batch) {
		t.Fatalf("two claims of one group: %v, %v, %d rows; want the first written", d.errs[0], d.errs[1], len(d.rows))
	}
}
