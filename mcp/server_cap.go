package mcp

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
	// open counts the POSTs (requests, notifications, answers) and DELETEs under
	// way in each session: the cap leaves a session with one, which its close
	// would cut (the SDK took the request, then closed its stream with no
	// answer, or answered 404, on which the official clients fail).
	open map[string]int
	// streams counts the GETs being served in each session: the streams of
	// notifications a client keeps open for as long as the session lives. The
	// cap leaves a session with one too. Its close would end the stream, which
	// the official clients (Go, TypeScript, Python) open again at once, resuming
	// the session, whose cap would close the next session holding a stream, and
	// so on without end; and the Go SDK's client fails for good once its stream
	// was opened again six times with no event between. The sessions held are
	// then at most MaxSessions, or those with a stream held or a request under
	// way, if more: the streams held are bounded by the connections the node
	// takes.
	streams map[string]int
	// closing holds the sessions capSessions is closing, each with a channel
	// closed once their Close returned. The SDK lists such a session until then,
	// and its handler would take a request in it only to cut it: a request in it
	// waits (enter), and then resumes a session of the ID, which begins after
	// the closed one ended (the SDK forgot its ID, ran its end) and which
	// nothing of the closed one's end touches.
	closing map[string]chan struct{}
	// holds counts the requests under way in each session that keep it from
	// idling out (holds), and idle holds the idle timer of each session none
	// holds (server_idle.go).
	holds map[string]int
	idle  map[string]*idleTimer
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

// enter waits while capSessions closes session id, and then counts r under way
// in it until the returned leave: a GET as a stream held (streams), anything
// else as a request (open). It returns false when r's context ends first. A
// POST holding only answers (to the server's requests) does not wait, since the
// close may wait for them (a call of the server's under way holds the
// session's Close); it is counted only when no close is under way. A
// notification waits and counts like a request: let through, it would resume
// the session while the close still ran, and the SDK's end of the closed
// session then forgets the handler's entry of that ID, the resumed session's.
// A request that holds its session (holds) keeps it from idling out until
// leave.
func (s *Server) enter(r *http.Request, id string, answers bool) (leave func(), ok bool) {
	counts := &s.use.open
	held := holds(r)
	if r.Method == http.MethodGet {
		counts = &s.use.streams
	}
	for {
		s.use.mu.Lock()
		done := s.use.closing[id]
		if done == nil {
			if *counts == nil {
				*counts = map[string]int{}
			}
			(*counts)[id]++
			if held {
				s.holdLocked(id)
			}
			s.use.mu.Unlock()
			break
		}
		s.use.mu.Unlock()
		if answers {
			return func() {}, true
		}
		if s.waitingClose != nil {
			s.waitingClose(id)
		}
		select {
		case <-done:
		case <-r.Context().Done():
			return nil, false
		}
	}
	return func() {
		s.use.mu.Lock()
		if (*counts)[id]--; (*counts)[id] <= 0 {
			delete(*counts, id)
		}
		ended := r.Method == http.MethodGet && (*counts)[id] == 0
		if held {
			s.releaseLocked(id)
		}
		s.use.mu.Unlock()
		if ended {
			// The session's last stream ended: the sessions its stream kept from
			// the cap may be closed now. Before, they stayed past MaxSessions until
			// a session started or resumed, or for session_timeout, after their
			// streams hung up (a client holding many made-up sessions' streams at
			// once, then hanging up). The session itself stays: its client's
			// stream may come back at once.
			s.capSessions(id)
		}
	}, true
}

// closingNow reports whether capSessions is closing session id.
func (s *Server) closingNow(id string) bool {
	s.use.mu.Lock()
	defer s.use.mu.Unlock()
	return s.use.closing[id] != nil
}

// capSessions closes, while the server holds more sessions over Streamable HTTP
// than ServerOptions.MaxSessions, the one whose last request is the oldest, but
// for keep (the session just started) and those with a request, a call or a
// stream (GET) under way. A client whose session was closed so is not refused: its next request
// resumes the session (serveSessions), as after a restart.
func (s *Server) capSessions(keep string) {
	s.use.mu.Lock()
	if len(s.use.last) <= cmp.Or(s.opts.MaxSessions, DefaultMaxSessions) {
		// At most that many sessions marked used, live or not: none over the
		// cap, and nothing to list (a session that ends leaves last, dropLive).
		s.use.mu.Unlock()
		return
	}
	// Listed under the lock: a session closed here is then either in closing or,
	// its Close returned, no longer listed by the SDK.
	live := map[string]*sdk.ServerSession{}
	for ss := range s.sdkSessions() {
		if id := ss.ID(); id != "" && s.use.closing[id] == nil {
			live[id] = ss
		}
	}
	for id := range s.use.last {
		if live[id] == nil {
			delete(s.use.last, id) // ended (deleted, timed out, closed here)
		}
	}
	// A session with no request marked is being started by a request under way:
	// an initialize or a resumption, marked once the SDK answered it, and
	// counted from then on (an initialize runs the cap then); or the SDK's own,
	// for a request outside any session (the Go SDK's client sends
	// server/discover ahead of its initialize), which it ends once it answered.
	// Such a session is neither counted, nor closed: it is the newest, not the
	// oldest, and the SDK is still setting it up, so closing it now would race
	// with its connection being made. Counted, one took the place of a session
	// the cap then closed for nothing.
	over := -cmp.Or(s.opts.MaxSessions, DefaultMaxSessions)
	for id := range live {
		if _, used := s.use.last[id]; used {
			over++
		}
	}
	var idle []string
	if over > 0 {
		for id := range live {
			if _, used := s.use.last[id]; used && id != keep && s.use.open[id] == 0 && s.use.streams[id] == 0 && !s.busy(id) {
				idle = append(idle, id)
			}
		}
		slices.SortFunc(idle, func(a, b string) int { return cmp.Compare(s.use.last[a], s.use.last[b]) })
		idle = idle[:min(over, len(idle))]
		if s.use.closing == nil {
			s.use.closing = map[string]chan struct{}{}
		}
		for _, id := range idle {
			s.use.closing[id] = make(chan struct{})
			delete(s.use.last, id)
		}
	}
	s.use.mu.Unlock()
	for _, id := range idle {
		s.opts.Logger.Info("mcp server: the session idle the longest closed: the server holds at most this many; its client's next request resumes it",
			"session", id, "max_sessions", cmp.Or(s.opts.MaxSessions, DefaultMaxSessions))
		if s.capClosing != nil {
			s.capClosing(id)
		}
		// Close returns once the SDK forgot the session: off its list (run by the
		// connection's end, before Close returns) and its handler's map, its
		// events dropped.
		_ = live[id].Close()
		if s.capClosed != nil {
			s.capClosed(id)
		}
		s.use.mu.Lock()
		s.forgetIdleLocked(id)
		close(s.use.closing[id])
		delete(s.use.closing, id)
		s.use.mu.Unlock()
	}
}

// busy reports whether session id has a call under way.
func (s *Server) busy(id string) bool {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	return len(s.calls[id]) > 0
}

// onlyAnswers reports whether body, a JSON-RPC message or batch, holds only
// answers (responses), as the SDK reads it: its decoder (case-sensitive keys,
// the first of a repeated one), not encoding/json's (any case, the last), which
// reads {"id":1,"method":"tools/list","ID":null} as a notification the SDK
// serves as a call. What the SDK would not read (refused 400) is not answers.
func onlyAnswers(body []byte) bool {
	var batch []json.RawMessage
	if json.Unmarshal(body, &batch) != nil {
		batch = []json.RawMessage{body}
	}
	for _, raw := range batch {
		if msg, err := jsonrpc.DecodeMessage(raw); err != nil {
			return false
		} else if _, ok := msg.(*jsonrpc.Response); !ok {
			return false
		}
	}
	return len(batch) > 0
}
