package mcp

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxStreamsPerSession bounds the streams a session's events are kept for: every
// POST of a client's request opens one (a tools/call, a tools/list, …),
// and the SDK's MemoryEventStore kept an entry for each until the session closed,
// so a client that stayed connected and kept calling (it answers pings: its session
// never times out) grew the node's memory with every request, for days. Past the
// bound, the session's oldest stream is forgotten: a GET resuming it is answered
// as one whose events were purged, and a run_task's call, recorded in the log, is
// answered from there (resumeCall).
const maxStreamsPerSession = 256

// maxEventBytes bounds the events' data kept for all sessions (the SDK's default).
const maxEventBytes = 10 << 20

// eventStore is the sdk.EventStore of the streams over Streamable HTTP: the SDK's
// MemoryEventStore's rules (the last maxEventBytes of data, the oldest first
// purged; a session's streams dropped when it closes), with at most
// maxStreamsPerSession streams a session. Open tells the run_task call of the
// request that opens a stream (a pendingCall in the request's context) the
// stream's ID.
type eventStore struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	sessions map[string]*sessionStreams
}

var _ sdk.EventStore = (*eventStore)(nil)

// sessionStreams are one session's streams, in the order they were opened.
type sessionStreams struct {
	order   []string
	streams map[string]*eventList
}

// eventList is one stream's data: first is the stream index of data[0].
type eventList struct {
	first int
	data  [][]byte
	size  int
}

func newEventStore() *eventStore {
	return &eventStore{maxBytes: maxEventBytes, sessions: map[string]*sessionStreams{}}
}

// Open implements sdk.EventStore.
func (s *eventStore) Open(ctx context.Context, sessionID, streamID string) error {
	if c, ok := ctx.Value(pendingKey{}).(*pendingCall); ok {
		c.mu.Lock()
		c.stream = streamID
		c.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream(sessionID, streamID)
	return nil
}

// stream returns the list of a session's stream, opening it (and forgetting the
// session's oldest past maxStreamsPerSession) when it is new. s.mu is held.
func (s *eventStore) stream(sessionID, streamID string) *eventList {
	ss := s.sessions[sessionID]
	if ss == nil {
		ss = &sessionStreams{streams: map[string]*eventList{}}
		s.sessions[sessionID] = ss
	}
	if l := ss.streams[streamID]; l != nil {
		return l
	}
	for len(ss.order) >= maxStreamsPerSession {
		oldest := ss.order[0]
		ss.order = slices.Delete(ss.order, 0, 1)
		if l := ss.streams[oldest]; l != nil {
			s.bytes -= l.size
			delete(ss.streams, oldest)
		}
	}
	l := &eventList{}
	ss.streams[streamID] = l
	ss.order = append(ss.order, streamID)
	return l
}

// Append implements sdk.EventStore.
func (s *eventStore) Append(_ context.Context, sessionID, streamID string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.stream(sessionID, streamID)
	s.purge(len(data))
	l.data = append(l.data, data)
	l.size += len(data)
	s.bytes += len(data)
	return nil
}

// purge drops the oldest data of every stream until n more bytes fit under
// maxBytes (or nothing is left to drop). s.mu is held.
func (s *eventStore) purge(n int) {
	for s.bytes+n > s.maxBytes {
		dropped := false
		for _, ss := range s.sessions {
			for _, l := range ss.streams {
				if len(l.data) > 0 {
					s.bytes -= len(l.data[0])
					l.size -= len(l.data[0])
					l.data[0] = nil
					l.data = l.data[1:]
					l.first++
					dropped = true
				}
			}
		}
		if !dropped {
			return
		}
	}
}

// After implements sdk.EventStore.
func (s *eventStore) After(_ context.Context, sessionID, streamID string, index int) iter.Seq2[[]byte, error] {
	data, err := func() ([][]byte, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss := s.sessions[sessionID]
		if ss == nil {
			return nil, fmt.Errorf("mcp event store: unknown session %q", sessionID)
		}
		l := ss.streams[streamID]
		if l == nil {
			return nil, fmt.Errorf("mcp event store: stream %q of session %q: %w", streamID, sessionID, sdk.ErrEventsPurged)
		}
		start := index + 1 - l.first
		if start < 0 {
			return nil, fmt.Errorf("mcp event store: index %d of stream %q of session %q: %w", index, streamID, sessionID, sdk.ErrEventsPurged)
		}
		if start >= len(l.data) {
			return nil, nil
		}
		return slices.Clone(l.data[start:]), nil
	}()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range data {
			if !yield(d, nil) {
				return
			}
		}
	}
}

// SessionClosed implements sdk.EventStore.
func (s *eventStore) SessionClosed(_ context.Context, sessionID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		for _, l := range ss.streams {
			s.bytes -= l.size
		}
		delete(s.sessions, sessionID)
	}
	return nil
}

// has reports whether the store can replay a session's stream after index idx.
func (s *eventStore) has(ctx context.Context, sessionID, streamID string, idx int) bool {
	for _, err := range s.After(ctx, sessionID, streamID, idx) {
		return err == nil
	}
	return true
}

// streams counts the streams a session's events are kept for.
func (s *eventStore) streams(sessionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		return len(ss.streams)
	}
	return 0
}
