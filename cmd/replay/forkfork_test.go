package main

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A fork of a fork made at a seq the first fork copied leaves its task and its
// approval the time they had left there, as a fork of the session itself does:
// the first fork's move of them is not made a second time.
func TestForkOfAForkMovesTimesOnce(t *testing.T) {
	const s = int64(1_000_000)
	var parent []messages.Envelope
	for _, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "mail bob", DeadlineUS: 61 * s},
		&messages.ToolCallRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}"},
		&messages.ApprovalRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}", ExpiresUS: 603 * s},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(parent) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("p/%d", seq), "p", seq, int64(seq)*s, "session"
		parent = append(parent, e)
		if seq > 1 {
			parent[seq-1].CorrelationID = "p/1"
		}
	}
	parent[0].CorrelationID = "p/1"
	// At seq 3 (3 s), the task has 58 s left and the approval 600 s.
	left := func(t *testing.T, events []messages.Envelope, now int64) (deadline, expiry int64) {
		t.Helper()
		for _, e := range events {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *messages.TaskSubmitted:
				deadline = p.DeadlineUS - now
			case *messages.ApprovalRequested:
				expiry = p.ExpiresUS - now
			}
		}
		return deadline, expiry
	}
	first, err := forkEvents(parent, 3, "f1", 3600*s)
	if err != nil {
		t.Fatal(err)
	}
	if d, x := left(t, first, 3600*s); d != 58*s || x != 600*s {
		t.Fatalf("fork: %d µs and %d µs left, want %d and %d", d, x, 58*s, 600*s)
	}
	for _, at := range []uint64{3, 4} {
		second, err := forkEvents(first, at, "f2", 7200*s)
		if err != nil {
			t.Fatal(err)
		}
		// At 4, the first fork's session.forked, the times left were those the
		// first fork went on with.
		if d, x := left(t, second, 7200*s); d != 58*s || x != 600*s {
			t.Errorf("fork of the fork at %d: %d µs and %d µs left, want %d and %d", at, d, x, 58*s, 600*s)
		}
	}
}
