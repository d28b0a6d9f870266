package eventlogtest

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The tests of eventlog.Compacting: chosen events of a knowledge base's stream
// are deleted together, never its last one, and the holes they leave are not
// filled by a writer that folded before.

func (s *suite) compacting(t *testing.T) (eventlog.Log, eventlog.Compacting) {
	t.Helper()
	l := s.newLog(t)
	c, ok := l.(eventlog.Compacting)
	if !ok {
		t.Skipf("%T does not implement eventlog.Compacting", l)
	}
	return l, c
}

func kbEvents(t *testing.T, b *session, n int) []messages.Envelope {
	t.Helper()
	out := make([]messages.Envelope, n)
	for i := range out {
		out[i] = b.next(t, &messages.KBDocumentRemoved{Reason: "test", Source: fmt.Sprintf("doc%d", i%3)})
	}
	return out
}

func (s *suite) testDeleteEvents(t *testing.T) {
	l, c := s.compacting(t)
	b := newSession("kb/handbook", 1_700_000_000_000_000)
	events := kbEvents(t, b, 6)
	s.append(t, l, events...)
	other := newSession("s-compact", 1_700_000_000_000_000)
	s.append(t, l, other.task(t, completed())...)

	// The last seq (6) is listed but stays; 9 is not stored.
	n, err := c.DeleteEvents(s.ctx(t), "kb/handbook", []uint64{2, 4, 6, 9, 2})
	if err != nil {
		t.Fatalf("DeleteEvents: %v", err)
	}
	if n != 2 {
		t.Fatalf("DeleteEvents deleted %d events, want 2 (seqs 2 and 4)", n)
	}
	kept := []messages.Envelope{events[0], events[2], events[4], events[5]}
	s.wantRead(t, l, "kb/handbook", 1, kept)
	s.wantRead(t, l, "kb/handbook", 3, kept[1:])
	infos, err := l.Sessions(s.ctx(t), eventlog.Filter{Prefix: "kb/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Events != 4 || infos[0].LastSeq != 6 {
		t.Fatalf("Sessions after the deletion = %+v, want one stream of 4 events up to seq 6", infos)
	}

	// A writer that folded before the deletion (up to seq 1) does not fill the
	// hole at seq 2; a repeat of a stored event is still one; the next seq is 7.
	stale := b.event(t, 2, &messages.KBDocumentRemoved{Reason: "stale writer", Source: "doc9"})
	stale.ID += "-stale"
	s.appendErr(t, l, eventlog.ErrSeqConflict, stale)
	s.append(t, l, events[2])
	next := b.next(t, &messages.KBDocumentRemoved{Reason: "after", Source: "doc0"})
	s.append(t, l, next)
	s.wantRead(t, l, "kb/handbook", 1, append(kept, next))

	// Sessions and other streams are refused, and nothing is deleted.
	for _, stream := range []string{"s-compact", "memory/alice", "kb/"} {
		if _, err := c.DeleteEvents(s.ctx(t), stream, []uint64{1}); err == nil {
			t.Fatalf("DeleteEvents(%q) = nil, want an error", stream)
		}
	}
	if _, err := c.DeleteEvents(s.ctx(t), "kb/handbook", []uint64{0, 1}); err == nil {
		t.Fatal("DeleteEvents(seq 0) = nil, want an error")
	}
	s.wantRead(t, l, "kb/handbook", 1, append(kept, next))
	got, err := l.Read(s.ctx(t), "s-compact", 1)
	if err != nil || len(got) != 8 {
		t.Fatalf("the session after refused deletions: %d events, %v; want 8", len(got), err)
	}
}
