package node

import (
	"cmp"
	"slices"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// logTail is what a reader of a session's log checks again at its next read to
// know that the log still holds what it read: the IDs of the last events it read,
// at seqs from, from+1, …, and, when set, the digest of the last
// (actors.EventSum), so that a session pruned and begun again, whose events have
// the same IDs, does not pass for it. A takeover that replaced or hid a stale
// owner's events (eventlog.Superseded) does not either. The session feed's folds
// (feedFold), the status reads' kept folds (statusFold) and a delegate's reads of
// its child (childEnd) keep one.
type logTail struct {
	from uint64
	ids  []string
	sum  string // "": not checked
}

// tailOf is the tail of the last n of events, read from the log in seq order,
// with the digest of the last; the zero tail when events is empty.
func tailOf(events []messages.Envelope, n int) logTail {
	if len(events) == 0 {
		return logTail{}
	}
	last := events[max(0, len(events)-n):]
	t := logTail{from: last[0].Seq, sum: actors.EventSum(last[len(last)-1])}
	for _, e := range last {
		t.ids = append(t.ids, e.ID)
	}
	return t
}

// add appends e, read from the log, keeping the last n: a tail that e does not
// follow without a gap starts again at e. The digest is left as it is.
func (t *logTail) add(e messages.Envelope, n int) {
	if len(t.ids) == 0 || e.Seq != t.from+uint64(len(t.ids)) {
		t.from, t.ids = e.Seq, t.ids[:0]
	}
	t.ids = append(t.ids, e.ID)
	if len(t.ids) > n {
		t.ids = t.ids[1:]
		t.from++
	}
}

// heldIn reports whether events, read from the log from seq t.from or before in
// seq order, still hold the tail's events at their seqs (and the last's digest
// when the tail has one); after is then the index in events of the first event
// past the tail. An empty tail is held nowhere.
func (t logTail) heldIn(events []messages.Envelope) (after int, held bool) {
	if len(t.ids) == 0 {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(events, t.from, func(e messages.Envelope, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	for j, id := range t.ids {
		if i+j >= len(events) || events[i+j].Seq != t.from+uint64(j) || events[i+j].ID != id {
			return 0, false
		}
	}
	after = i + len(t.ids)
	if t.sum != "" && actors.EventSum(events[after-1]) != t.sum {
		return 0, false
	}
	return after, true
}
