package mcp

import (
	"cmp"
	"slices"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxSessions is the default of ServerOptions.MaxSessions.
const DefaultMaxSessions = 1000

// sessionUse orders the sessions over Streamable HTTP by their last request, for
// capSessions: a client that opens sessions in a loop and never deletes them
// would otherwise grow the server's memory for a whole SessionTimeout.
type sessionUse struct {
	mu   sync.Mutex
	tick uint64
	last map[string]uint64 // the tick of each session's last request
	// closed holds the sessions closed here that the SDK still lists: it forgets
	// a closed session a moment after Close returns.
	closed map[string]bool
}

// touch marks a request in session id.
func (s *Server) touch(id string) {
	s.use.mu.Lock()
	defer s.use.mu.Unlock()
	if s.use.last == nil {
		s.use.last = map[string]uint64{}
	}
	s.use.tick++
	s.use.last[id] = s.use.tick
}

// capSessions closes, while the server holds more sessions over Streamable HTTP
// than ServerOptions.MaxSessions, the one whose last request is the oldest, but
// for keep (the session just started) and those with a call under way. A client
// whose session was closed so is not refused: its next request resumes the
// session (serveSessions), as after a restart.
func (s *Server) capSessions(keep string) {
	listed := map[string]*sdk.ServerSession{}
	for ss := range s.srv.Sessions() {
		if id := ss.ID(); id != "" {
			listed[id] = ss
		}
	}
	s.use.mu.Lock()
	live := map[string]*sdk.ServerSession{}
	for id, ss := range listed {
		if !s.use.closed[id] {
			live[id] = ss
		}
	}
	for id := range s.use.closed {
		if listed[id] == nil {
			delete(s.use.closed, id)
		}
	}
	for id := range s.use.last {
		if live[id] == nil {
			delete(s.use.last, id) // ended (deleted, timed out, closed here)
		}
	}
	over := len(live) - cmp.Or(s.opts.MaxSessions, DefaultMaxSessions)
	var idle []string
	if over > 0 {
		for id := range live {
			// A session with no request marked is being started by a request
			// under way (an initialize, marked once the SDK answers it): it is
			// the newest, not the oldest, and the SDK is still setting it up,
			// so closing it now would race with its connection being made.
			if _, used := s.use.last[id]; used && id != keep && !s.busy(id) {
				idle = append(idle, id)
			}
		}
		slices.SortFunc(idle, func(a, b string) int { return cmp.Compare(s.use.last[a], s.use.last[b]) })
		idle = idle[:min(over, len(idle))]
		if s.use.closed == nil {
			s.use.closed = map[string]bool{}
		}
		for _, id := range idle {
			s.use.closed[id] = true
			delete(s.use.last, id)
		}
	}
	s.use.mu.Unlock()
	for _, id := range idle {
		s.opts.Logger.Info("mcp server: the session idle the longest closed: the server holds at most this many; its client's next request resumes it",
			"session", id, "max_sessions", cmp.Or(s.opts.MaxSessions, DefaultMaxSessions))
		_ = live[id].Close()
	}
}

// busy reports whether session id has a call under way.
func (s *Server) busy(id string) bool {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	return len(s.calls[id]) > 0
}
