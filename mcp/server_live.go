package mcp

import (
	"context"
	"iter"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The live sessions over Streamable HTTP, by ID. Every request in a session asks
// whether the server holds it (known), and every session started or resumed, and
// every stream of notifications that ends, runs the cap (capSessions). The SDK
// lists its sessions only as a copy of the whole list (Server.Sessions): asked
// there, a request cost time in proportion to the sessions held (at 10,000, 8
// times a tools/list's own), under the lock every request takes on its way in
// and out (sessionUse.mu), so that many clients slowed every request and served
// them one at a time. The server keeps its own index instead, as the SDK's list
// changes: a session enters it with its initialize (before that, no client
// knows its ID), and leaves it once the SDK dropped it from its list (its
// connection's Wait returned). Between the start of its close (the SDK's
// SessionClosed to the event store) and then, the SDK's list is asked, as
// before, so that the index answers what the list would.

// liveSession is a session of the index.
type liveSession struct {
	ss *sdk.ServerSession
	// closing: the SDK started to close it (SessionClosed) and may have dropped
	// it from its list already.
	closing bool
}

// liveIndex is the index of the live sessions over Streamable HTTP.
type liveIndex struct {
	mu   sync.Mutex
	byID map[string]*liveSession
}

// trackLive is a receiving middleware that enters the session of an
// initialize (over Streamable HTTP: a session with an ID) in the index.
func (s *Server) trackLive(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if ss, ok := req.GetSession().(*sdk.ServerSession); ok && method == "initialize" {
			if id := ss.ID(); id != "" {
				s.addLive(id, ss)
			}
		}
		return next(ctx, method, req)
	}
}

// addLive enters ss, of ID id, in the index, until the SDK dropped it.
func (s *Server) addLive(id string, ss *sdk.ServerSession) {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if e := s.live.byID[id]; e != nil && e.ss == ss {
		return // an initialize again in the session
	}
	if s.live.byID == nil {
		s.live.byID = map[string]*liveSession{}
	}
	s.live.byID[id] = &liveSession{ss: ss}
	go func() {
		_ = ss.Wait() // returns once the SDK dropped ss from its list
		s.dropLive(id, ss)
	}()
}

// dropLive takes ss, of ID id, out of the index (not a session of the same ID
// that a resumption started since), and forgets when it was used last.
func (s *Server) dropLive(id string, ss *sdk.ServerSession) {
	s.live.mu.Lock()
	e := s.live.byID[id]
	if e == nil || e.ss != ss {
		s.live.mu.Unlock()
		return
	}
	delete(s.live.byID, id)
	s.live.mu.Unlock()
	s.use.mu.Lock()
	if !s.known(id) {
		delete(s.use.last, id)
	}
	s.use.mu.Unlock()
}

// closingLive marks session id closing: the SDK started to close it.
func (s *Server) closingLive(id string) {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if e := s.live.byID[id]; e != nil {
		e.closing = true
	}
}

// liveSessionOf returns the session of ID id that the SDK lists, or nil.
func (s *Server) liveSessionOf(id string) *sdk.ServerSession {
	s.live.mu.Lock()
	e := s.live.byID[id]
	var ss *sdk.ServerSession
	closing := false
	if e != nil {
		ss, closing = e.ss, e.closing
	}
	s.live.mu.Unlock()
	if ss == nil || !closing {
		return ss
	}
	// Closing: the SDK's list says whether it is still live.
	for live := range s.sdkSessions() {
		if live.ID() == id {
			return live
		}
	}
	return nil
}

// known reports whether the server has a session of id.
func (s *Server) known(id string) bool {
	return s.liveSessionOf(id) != nil
}

// sdkSessions lists the SDK's sessions (a copy of its whole list).
func (s *Server) sdkSessions() iter.Seq[*sdk.ServerSession] {
	return func(yield func(*sdk.ServerSession) bool) {
		for ss := range s.srv.Sessions() {
			if s.listed != nil {
				s.listed.Add(1)
			}
			if !yield(ss) {
				return
			}
		}
	}
}

// liveEvents is the server's event store, which also marks a session closing
// in the index as the SDK closes it.
type liveEvents struct {
	*eventStore
	s *Server
}

// SessionClosed implements sdk.EventStore.
func (e liveEvents) SessionClosed(ctx context.Context, sessionID string) error {
	e.s.closingLive(sessionID)
	return e.eventStore.SessionClosed(ctx, sessionID)
}
