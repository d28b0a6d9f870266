package eventlogtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The tests of eventlog.Pruner: the streams that carried a message too large for
// the bus are deleted once old; sessions and other streams stay.

// busStream returns the one event of the bus stream of kind for key, stamped at ts.
func busStream(t *testing.T, kind string, key messages.EffectKey, body string, ts int64) messages.Envelope {
	t.Helper()
	e, err := messages.BusStoredEvent(messages.EffectStream(kind, key), []byte(body), ts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// wantGone polls, with eventual visibility, until Read(stream) returns no event.
func (s *suite) wantGone(t *testing.T, l eventlog.Log, stream string) {
	t.Helper()
	deadline := time.Now().Add(s.f.VisibilityTimeout)
	for {
		got, err := l.Read(s.ctx(t), stream, 1)
		if err != nil {
			t.Fatalf("Read(%q): %v", stream, err)
		}
		if len(got) == 0 {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("Read(%q) returned %s after it was pruned", stream, describe(got))
		}
		pause(t, 20*time.Millisecond)
	}
}

// testPruneBusStreams: PruneBusStreams deletes the bus streams whose last event is
// older than the bound, within the limit, and nothing else: not a session, not
// another stream that is no session, not a bus stream stamped later. A pruned
// stream's ID can be stored again.
func (s *suite) testPruneBusStreams(t *testing.T) {
	l := s.newLog(t)
	p, ok := l.(eventlog.Pruner)
	if !ok {
		t.Skipf("%T does not implement eventlog.Pruner", l)
	}
	body := func(k messages.EffectKey) string {
		return fmt.Sprintf(`{"v":1,"session_id":%q,"key":%q,"output":"long"}`, k.SessionID, k.String())
	}
	var old []messages.Envelope
	for i := range 5 {
		k := messages.EffectKey{SessionID: "pruned", Seq: uint64(2 + i)}
		kind := messages.BusStoredRequest
		if i%2 == 1 {
			kind = messages.BusStoredReply
		}
		old = append(old, busStream(t, kind, k, body(k), int64(1_000_000+i)))
	}
	recentKey := messages.EffectKey{SessionID: "pruned", Seq: 40}
	recent := busStream(t, messages.BusStoredReply, recentKey, body(recentKey), 9_000_000)
	sess := newSession("pruned", 1_000_000) // as old as the streams: a session is never pruned
	kept := sess.task(t, completed())
	notes := newSession(eventlog.NotesStreamPrefix+"pruned", 1_000_000)
	noteEvents := []messages.Envelope{notes.next(t, &messages.NoteAdded{NoteID: "n1", Type: "fact", Body: "kept"})}
	for _, e := range old {
		s.append(t, l, e)
	}
	s.append(t, l, recent)
	s.append(t, l, kept...)
	s.append(t, l, noteEvents...)
	for _, e := range append(old, recent) {
		s.wantRead(t, l, e.SessionID, 1, []messages.Envelope{e})
	}

	if _, err := p.PruneBusStreams(s.ctx(t), 5_000_000, 0); err == nil {
		t.Error("PruneBusStreams with limit 0 returned no error")
	}
	n, err := p.PruneBusStreams(s.ctx(t), 5_000_000, 3)
	if err != nil || n != 3 {
		t.Fatalf("PruneBusStreams(before 5 s, limit 3) = %d, %v; want 3 of the 5 due", n, err)
	}
	gone := 0
	deadline := time.Now().Add(s.f.VisibilityTimeout)
	for {
		gone = 0
		for _, e := range old {
			got, err := l.Read(s.ctx(t), e.SessionID, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				gone++
			}
		}
		if gone >= 3 || !time.Now().Before(deadline) {
			break
		}
		pause(t, 20*time.Millisecond)
	}
	if gone != 3 {
		t.Fatalf("%d of the 5 due streams are gone after a prune of 3", gone)
	}
	n, err = p.PruneBusStreams(s.ctx(t), 5_000_000, 3)
	if err != nil || n != 2 {
		t.Fatalf("PruneBusStreams again = %d, %v; want the 2 left", n, err)
	}
	for _, e := range old {
		s.wantGone(t, l, e.SessionID)
	}
	if n, err := p.PruneBusStreams(s.ctx(t), 5_000_000, 3); err != nil || n != 0 {
		t.Fatalf("PruneBusStreams with nothing due = %d, %v; want 0", n, err)
	}
	s.wantRead(t, l, recent.SessionID, 1, []messages.Envelope{recent})
	s.wantRead(t, l, sess.id, 1, kept)
	s.wantRead(t, l, notes.id, 1, noteEvents)
	infos, err := l.Sessions(s.ctx(t), eventlog.Filter{Prefix: eventlog.BusStreamPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != recent.SessionID {
		t.Errorf("Sessions(bus prefix) after pruning = %s, want only %s", describeSessions(infos), recent.SessionID)
	}

	// The ID of a pruned stream is free again: a request issued again stores anew.
	again := busStream(t, messages.BusStoredRequest, messages.EffectKey{SessionID: "pruned", Seq: 2}, `{"v":2}`, 10_000_000)
	if again.SessionID != old[0].SessionID {
		t.Fatalf("stream %s, want %s", again.SessionID, old[0].SessionID)
	}
	s.append(t, l, again)
	s.wantRead(t, l, again.SessionID, 1, []messages.Envelope{again})

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PruneBusStreams(s.ctx(t), 5_000_000, 3); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("PruneBusStreams after Close = %v, want ErrClosed", err)
	}
}

// ownStream returns n events of stream id, stamped from baseUS on, each with an
// ID of its own (as the MCP server's and the A2A push configs' are).
func ownStream(t *testing.T, id string, baseUS int64, n int) []messages.Envelope {
	t.Helper()
	b := newSession(id, baseUS)
	var events []messages.Envelope
	for i := range n {
		e := b.next(t, &messages.MCPSubscribed{URI: fmt.Sprintf("notes://%d", i)})
		e.ID = fmt.Sprintf("own-%s-%d", id, i)
		events = append(events, e)
	}
	return events
}

// testPruneListed: PruneListed deletes, of the streams listed, those whose last
// event is stamped before their own bound, in one call, and nothing else: not a
// stream written at or after its bound (a change since its caller looked), not a
// stream not listed. A list naming a stream that is not prunable, a prefix, a
// stream twice or too many streams is an error and deletes nothing.
func (s *suite) testPruneListed(t *testing.T) {
	l := s.newLog(t)
	p, ok := l.(eventlog.Pruner)
	if !ok {
		t.Skipf("%T does not implement eventlog.Pruner", l)
	}
	last := func(events []messages.Envelope) int64 { return events[len(events)-1].TS }
	mcpA := ownStream(t, eventlog.MCPSessionStreamPrefix+"A", 1_000_000, 3)
	mcpB := ownStream(t, eventlog.MCPSessionStreamPrefix+"B", 1_000_000, 1)
	pushDue := ownStream(t, eventlog.A2APushStreamPrefix+"t1", 1_000_000, 2)
	pushSince := ownStream(t, eventlog.A2APushStreamPrefix+"t2", 1_000_000, 2)
	bus := busStream(t, messages.BusStoredReply, messages.EffectKey{SessionID: "listed", Seq: 2}, `{"v":1}`, 1_000_000)
	notes := ownStream(t, eventlog.NotesStreamPrefix+"n", 1_000_000, 1)
	for _, events := range [][]messages.Envelope{mcpA, mcpB, pushDue, pushSince, {bus}, notes} {
		s.append(t, l, events...)
	}
	due := []eventlog.StreamBound{
		{ID: mcpA[0].SessionID, BeforeUS: 5_000_000},
		{ID: pushDue[0].SessionID, BeforeUS: last(pushDue) + 1}, // the last event seen, as a2a passes it
		{ID: bus.SessionID, BeforeUS: bus.TS + 1},
	}
	kept := []eventlog.StreamBound{
		{ID: pushSince[0].SessionID, BeforeUS: pushSince[0].TS + 1}, // its second event came after the caller looked
		{ID: eventlog.MCPSessionStreamPrefix + "none", BeforeUS: 5_000_000},
	}

	for _, bad := range []struct {
		why  string
		list []eventlog.StreamBound
	}{
		{"a notes stream", append(slices.Clone(due), eventlog.StreamBound{ID: notes[0].SessionID, BeforeUS: 5_000_000})},
		{"a session", append(slices.Clone(due), eventlog.StreamBound{ID: "session-1", BeforeUS: 5_000_000})},
		{"an empty ID", append(slices.Clone(due), eventlog.StreamBound{BeforeUS: 5_000_000})},
		{"a prefix", append(slices.Clone(due), eventlog.StreamBound{ID: eventlog.MCPSessionStreamPrefix, BeforeUS: 5_000_000})},
		{"a stream twice", append(slices.Clone(due), due[0])},
		{"too many streams", slices.Repeat(due[:1], eventlog.MaxPruneListed+1)},
	} {
		if n, err := p.PruneListed(s.ctx(t), bad.list); err == nil {
			t.Errorf("PruneListed of a list with %s = %d, nil; want an error", bad.why, n)
		}
	}
	for _, events := range [][]messages.Envelope{mcpA, pushDue, {bus}} {
		s.wantRead(t, l, events[0].SessionID, 1, events) // a refused list deleted nothing
	}
	if n, err := p.PruneListed(s.ctx(t), nil); err != nil || n != 0 {
		t.Errorf("PruneListed of no streams = %d, %v; want 0", n, err)
	}

	n, err := p.PruneListed(s.ctx(t), slices.Concat(kept[:1], due, kept[1:]))
	if err != nil || n != len(due) {
		t.Fatalf("PruneListed = %d, %v; want the %d due", n, err, len(due))
	}
	for _, d := range due {
		s.wantGone(t, l, d.ID)
	}
	s.wantRead(t, l, pushSince[0].SessionID, 1, pushSince)
	s.wantRead(t, l, mcpB[0].SessionID, 1, mcpB)
	s.wantRead(t, l, notes[0].SessionID, 1, notes)
	infos, err := l.Sessions(s.ctx(t), eventlog.Filter{Prefix: eventlog.A2APushStreamPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != pushSince[0].SessionID {
		t.Errorf("Sessions(push prefix) after PruneListed = %s, want only %s", describeSessions(infos), pushSince[0].SessionID)
	}
	// The stream's ID and its events' IDs are free again.
	s.append(t, l, mcpA...)
	s.wantRead(t, l, mcpA[0].SessionID, 1, mcpA)
	if n, err := p.PruneListed(s.ctx(t), due[1:]); err != nil || n != 0 {
		t.Errorf("PruneListed of streams gone = %d, %v; want 0", n, err)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PruneListed(s.ctx(t), due); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("PruneListed after Close = %v, want ErrClosed", err)
	}
}

// testPruneStreams: PruneStreams deletes the streams of the prefix it is given
// whose last event is older than the bound (with events of IDs of their own, as
// the MCP server's are), and nothing else: not a later one, not another prefix's,
// not a session. A prefix that is not prunable is an error and deletes nothing.
func (s *suite) testPruneStreams(t *testing.T) {
	l := s.newLog(t)
	p, ok := l.(eventlog.Pruner)
	if !ok {
		t.Skipf("%T does not implement eventlog.Pruner", l)
	}
	stream := func(id string, ts int64, n int) []messages.Envelope {
		b := newSession(id, ts)
		var events []messages.Envelope
		for i := range n {
			e := b.next(t, &messages.MCPSubscribed{URI: fmt.Sprintf("notes://%d", i)})
			e.ID = fmt.Sprintf("mcp-%s-%d", id, i) // an ID of its own
			events = append(events, e)
		}
		return events
	}
	oldA := stream(eventlog.MCPSessionStreamPrefix+"A", 1_000_000, 3)
	oldB := stream(eventlog.MCPSessionStreamPrefix+"B", 1_000_000, 1)
	recent := stream(eventlog.MCPSessionStreamPrefix+"C", 9_000_000, 1)
	push := stream(eventlog.A2APushStreamPrefix+"t1", 1_000_000, 1)
	notes := stream(eventlog.NotesStreamPrefix+"n", 1_000_000, 1)
	sess := newSession(eventlog.MCPSessionStreamPrefix[:len(eventlog.MCPSessionStreamPrefix)-1], 1_000_000) // "mcp/session": a neighbour of the range
	kept := sess.task(t, completed())
	for _, events := range [][]messages.Envelope{oldA, oldB, recent, push, notes, kept} {
		s.append(t, l, events...)
	}
	if _, err := p.PruneStreams(s.ctx(t), eventlog.NotesStreamPrefix, 5_000_000, 10); err == nil {
		t.Error("PruneStreams of the notes' prefix returned no error")
	}
	if _, err := p.PruneStreams(s.ctx(t), eventlog.MCPSessionStreamPrefix, 5_000_000, 0); err == nil {
		t.Error("PruneStreams with limit 0 returned no error")
	}
	n, err := p.PruneStreams(s.ctx(t), eventlog.MCPSessionStreamPrefix, 5_000_000, 10)
	if err != nil || n != 2 {
		t.Fatalf("PruneStreams(MCP sessions before 5 s) = %d, %v; want the 2 due", n, err)
	}
	s.wantGone(t, l, oldA[0].SessionID)
	s.wantGone(t, l, oldB[0].SessionID)
	s.wantRead(t, l, recent[0].SessionID, 1, recent)
	s.wantRead(t, l, push[0].SessionID, 1, push)
	s.wantRead(t, l, notes[0].SessionID, 1, notes)
	s.wantRead(t, l, sess.id, 1, kept)
	// The stream's ID and its events' IDs are free again.
	s.append(t, l, oldB...)
	s.wantRead(t, l, oldB[0].SessionID, 1, oldB)
	// A whole stream ID prunes that stream only.
	n, err = p.PruneStreams(s.ctx(t), recent[0].SessionID, 10_000_000, 10)
	if err != nil || n != 1 {
		t.Fatalf("PruneStreams(%s before 10 s) = %d, %v; want 1", recent[0].SessionID, n, err)
	}
	s.wantGone(t, l, recent[0].SessionID)
	s.wantRead(t, l, oldB[0].SessionID, 1, oldB)
	n, err = p.PruneStreams(s.ctx(t), eventlog.A2APushStreamPrefix, 5_000_000, 10)
	if err != nil || n != 1 {
		t.Fatalf("PruneStreams(A2A push configs before 5 s) = %d, %v; want 1", n, err)
	}
	s.wantGone(t, l, push[0].SessionID)
}
