package node

import (
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A logTail is held by events that have its events at their seqs (read from its
// first or before), and not once one is replaced, hidden, or (with a digest)
// changed with the same ID; past the tail is where the events after it begin.
func TestLogTailHeldIn(t *testing.T) {
	ev := func(seq uint64, id, payload string) messages.Envelope {
		return messages.Envelope{Seq: seq, ID: id, SessionID: "s", Payload: []byte(payload)}
	}
	log := []messages.Envelope{ev(1, "a", "1"), ev(2, "b", "2"), ev(3, "c", "3"), ev(4, "d", "4")}
	tail := tailOf(log[:3], 2) // b, c, with c's digest
	if tail.from != 2 || len(tail.ids) != 2 {
		t.Fatalf("tailOf: from %d, ids %v", tail.from, tail.ids)
	}
	if after, held := tail.heldIn(log); !held || after != 3 {
		t.Errorf("the whole log: after %d, held %v; want 3, true", after, held)
	}
	if after, held := tail.heldIn(log[1:]); !held || after != 2 {
		t.Errorf("read from the tail: after %d, held %v; want 2, true", after, held)
	}
	changed := []messages.Envelope{log[0], log[1], ev(3, "c", "other"), log[3]}
	if _, held := tail.heldIn(changed); held {
		t.Error("held with its last event's payload changed")
	}
	noSum := tail
	noSum.sum = ""
	if _, held := noSum.heldIn(changed); !held {
		t.Error("a tail without a digest checks it")
	}
	if _, held := tail.heldIn([]messages.Envelope{log[0], log[2], log[3]}); held {
		t.Error("held with an event hidden")
	}
	if _, held := (logTail{}).heldIn(log); held {
		t.Error("the empty tail is held")
	}

	var fed logTail
	for _, e := range []messages.Envelope{log[0], log[1], log[3]} { // a gap: starts again at d
		fed.add(e, 2)
	}
	if fed.from != 4 || len(fed.ids) != 1 {
		t.Errorf("add over a gap: from %d, ids %v; want 4, [d]", fed.from, fed.ids)
	}
	fed = logTail{}
	for _, e := range log {
		fed.add(e, 2)
	}
	if fed.from != 3 || len(fed.ids) != 2 || fed.ids[0] != "c" {
		t.Errorf("add past n: from %d, ids %v; want 3, [c d]", fed.from, fed.ids)
	}
}
