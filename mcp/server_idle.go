package mcp

import (
	"net/http"
	"time"
)

// Idle sessions over Streamable HTTP. A session ends once its client sent no
// request for SessionTimeout with none under way. The server keeps that timer
// itself, not the SDK's handler: the handler held its timer only from its own
// lookup of the session on, so that a session that idled out while a request
// was on its way to it, taken by the server but not yet by the SDK, either
// answered 404 (on which the official clients fail for good) or, idling out
// between the SDK's lookup and its taking of a call, sent the call's priming
// event and never ran the call. The server holds a session from the moment it
// takes a request in it (enter) until it answered it, and closes an idle one as
// the cap does (capSessions): marked closing, so that a request that comes
// meanwhile waits for the close and then resumes the session.

// idleTimer is a session's idle timer: gen tells a firing that is no longer due
// (a request came since the timer was set) from one that is.
type idleTimer struct {
	t   *time.Timer
	gen uint64
}

// holds reports whether r keeps its session from idling out while it is
// served: any request but a GET of the stream of notifications (which a
// client keeps open for as long as the session lives: the client's answers to
// the server's pings on it keep the session); a GET that resumes a call's
// stream (Last-Event-ID) does, as the call's POST did, until the call
// answered. The stream of notifications opened again from its last event (its
// event IDs name the stream "": the go-sdk's client reopens it so) is not a
// call's: held, it kept a session whose client answered no ping for as long as
// the connection stayed open.
func holds(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return true
	}
	stream, _, ok := parseEventID(r.Header.Get("Last-Event-ID"))
	return ok && stream != ""
}

// holdLocked counts a request under way in session id, which stops its idle
// timer. s.use.mu is held.
func (s *Server) holdLocked(id string) {
	if s.use.holds == nil {
		s.use.holds = map[string]int{}
	}
	s.use.holds[id]++
	if it := s.use.idle[id]; it != nil {
		it.t.Stop()
		it.gen++ // a firing under way is no longer due
	}
}

// releaseLocked ends what holdLocked counted, and starts session id's idle timer
// once no request holds it. s.use.mu is held.
func (s *Server) releaseLocked(id string) {
	if s.use.holds[id]--; s.use.holds[id] <= 0 {
		delete(s.use.holds, id)
		s.idleFromLocked(id)
	}
}

// idleFrom starts session id's idle timer anew, unless a request holds it.
func (s *Server) idleFrom(id string) {
	s.use.mu.Lock()
	defer s.use.mu.Unlock()
	s.idleFromLocked(id)
}

func (s *Server) idleFromLocked(id string) {
	if s.use.holds[id] > 0 || s.use.closing[id] != nil {
		return
	}
	if !s.known(id) {
		s.forgetIdleLocked(id) // ended: deleted, or closed
		return
	}
	if s.use.idle == nil {
		s.use.idle = map[string]*idleTimer{}
	}
	it := s.use.idle[id]
	if it == nil {
		it = &idleTimer{}
		s.use.idle[id] = it
	} else {
		it.t.Stop()
	}
	it.gen++
	gen := it.gen
	it.t = time.AfterFunc(s.opts.SessionTimeout, func() { s.expire(id, gen) })
}

// forgetIdleLocked drops the idle timer of session id. s.use.mu is held.
func (s *Server) forgetIdleLocked(id string) {
	if it := s.use.idle[id]; it != nil {
		it.t.Stop()
		delete(s.use.idle, id)
	}
}

// expire closes session id, idle since the timer of generation gen was set,
// unless a request came since.
func (s *Server) expire(id string, gen uint64) {
	s.use.mu.Lock()
	it := s.use.idle[id]
	if it == nil || it.gen != gen || s.use.holds[id] > 0 || s.use.closing[id] != nil {
		s.use.mu.Unlock()
		return
	}
	delete(s.use.idle, id)
	ss := s.liveSessionOf(id)
	if ss == nil {
		s.use.mu.Unlock()
		return
	}
	if s.use.closing == nil {
		s.use.closing = map[string]chan struct{}{}
	}
	s.use.closing[id] = make(chan struct{})
	delete(s.use.last, id)
	s.use.mu.Unlock()
	s.opts.Logger.Debug("mcp server: an idle session closed: its client sent no request for the session timeout; its next request resumes it",
		"session", id, "session_timeout", s.opts.SessionTimeout)
	// Close returns once the SDK forgot the session (its list, its handler's map).
	_ = ss.Close()
	s.use.mu.Lock()
	close(s.use.closing[id])
	delete(s.use.closing, id)
	s.use.mu.Unlock()
}
