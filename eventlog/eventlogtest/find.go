package eventlogtest

import (
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// testFindEvent checks eventlog.EventFinding, where the log has it: an event
// named by its position's ID, or by another, is found as Read returns it; an
// ID of no event, another session's event, or the event held at a position
// whose derived ID names none, is not found; an event whose ID is the derived
// ID of another position (of its session, or of another) is found where it is.
func (s *suite) testFindEvent(t *testing.T) {
	l := s.newLog(t)
	f, ok := l.(eventlog.EventFinding)
	if !ok {
		t.Skip("the log does not find events by ID")
	}
	a, b := newSession("s-1", 1000), newSession("s-2", 2000)
	events := a.task(t, completed())
	named := events[2]
	named.ID = "task-7f3a" // not derived from its position
	events[2] = named
	// IDs that are the derived IDs of other positions: of a seq past the
	// session's, and of a session the log does not hold.
	events[1].ID, events[3].ID = "s-1/40", "s-9/1"
	s.append(t, l, events...)
	s.append(t, l, b.task(t, nil)...)
	s.wantRead(t, l, "s-1", 0, events)
	for _, want := range []int{0, 1, 2, 3, len(events) - 1} {
		got, found, err := f.FindEvent(s.ctx(t), "s-1", events[want].ID)
		if err != nil || !found || !reflect.DeepEqual(got, events[want]) {
			t.Errorf("FindEvent(s-1, %s) = %s, %v, %v; want %s", events[want].ID, describe([]messages.Envelope{got}), found, err, describe(events[want:want+1]))
		}
	}
	for _, c := range []struct{ session, id string }{
		{"s-1", "nothing"},
		{"s-1", "s-1/3"},     // the position holds task-7f3a
		{"s-1", "s-1/99"},    // past the session
		{"s-9", "s-9/1"},     // held by s-1
		{"s-2", "task-7f3a"}, // another session's
		{"s-1", "s-2/1"},
		{"nobody", "nobody/1"},
	} {
		if got, found, err := f.FindEvent(s.ctx(t), c.session, c.id); err != nil || found {
			t.Errorf("FindEvent(%s, %s) = %s, %v, %v; want nothing found", c.session, c.id, describe([]messages.Envelope{got}), found, err)
		}
	}
}

// wantFind checks that FindEvent of session the event id finds want, or none
// when want is nil, where the log is an eventlog.EventFinding.
func (s *suite) wantFind(t *testing.T, l eventlog.Log, session, id string, want *messages.Envelope) {
	t.Helper()
	f, ok := l.(eventlog.EventFinding)
	if !ok {
		return
	}
	got, found, err := f.FindEvent(s.ctx(t), session, id)
	switch {
	case err != nil:
		t.Errorf("FindEvent(%s, %s): %v", session, id, err)
	case want == nil && found:
		t.Errorf("FindEvent(%s, %s) = %s; want nothing found", session, id, describe([]messages.Envelope{got}))
	case want != nil && (!found || !reflect.DeepEqual(got, *want)):
		t.Errorf("FindEvent(%s, %s) = %s, %v; want %s", session, id, describe([]messages.Envelope{got}), found, describe([]messages.Envelope{*want}))
	}
}
