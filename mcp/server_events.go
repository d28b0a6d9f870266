package mcp

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strconv"
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
	// fifo is every datum kept, in the order appended (from head on), for purge
	// to drop the oldest first; entries of data dropped otherwise (a stream
	// forgotten, a session closed) are skipped when met, and cut out once they
	// outnumber the data kept (compact).
	fifo []datum
	head int
	// kept counts the data kept (the entries of fifo that are not stale).
	kept int
}

// datum is an entry of eventStore.fifo: the datum at stream index idx of l.
type datum struct {
	l   *eventList
	idx int
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
	gone  bool // forgotten: its entries in the store's fifo are stale
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
	opened(ctx, sessionID, streamID)
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
			s.forget(l)
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
	s.fifo = append(s.fifo, datum{l: l, idx: l.first + len(l.data)})
	s.kept++
	l.data = append(l.data, data)
	l.size += len(data)
	s.bytes += len(data)
	return nil
}

// forget drops all of stream l's data. s.mu is held.
func (s *eventStore) forget(l *eventList) {
	s.bytes -= l.size
	s.kept -= len(l.data)
	l.gone, l.data, l.size = true, nil, 0
	s.compact()
}

// purge drops the oldest data of all, whatever their streams, until n more bytes
// fit under maxBytes (or nothing is left to drop). Each datum is met once: an
// Append costs the data it drops, not a walk of every stream (the SDK's
// MemoryEventStore, whose rules these were, dropped the first datum of every
// stream at each pass, so past the bound each Append walked all the streams of
// all the sessions, up to 256,000, under the lock, and dropped the only datum of
// streams just opened). s.mu is held.
func (s *eventStore) purge(n int) {
	for s.bytes+n > s.maxBytes && s.head < len(s.fifo) {
		d := s.fifo[s.head]
		s.fifo[s.head] = datum{}
		s.head++
		if d.l.gone || d.idx != d.l.first || len(d.l.data) == 0 {
			continue // stale: dropped with its stream
		}
		s.bytes -= len(d.l.data[0])
		d.l.size -= len(d.l.data[0])
		d.l.data[0] = nil
		d.l.data = d.l.data[1:]
		d.l.first++
		s.kept--
	}
	s.compact()
}

// compact cuts the dropped and stale entries out of fifo once they are more than
// the data kept, so that it stays within twice the data kept (and 1,024). s.mu
// is held.
func (s *eventStore) compact() {
	if len(s.fifo)-s.kept <= max(s.kept, 1024) {
		return
	}
	live := make([]datum, 0, s.kept)
	for _, d := range s.fifo[s.head:] {
		if !d.l.gone && d.idx >= d.l.first {
			live = append(live, d)
		}
	}
	s.fifo, s.head = live, 0
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
		if l == nil && index == -1 {
			// A GET of the stream of notifications without a Last-Event-ID
			// (fromFirstKept), whose stream was forgotten: from now on.
			return nil, nil
		}
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

// fromFirstKept makes r, a GET of a session's stream of notifications without
// a Last-Event-ID, replay what is kept of the stream: the SDK replays such a GET
// the stream from its first event (index -1), and answered it 400 ("failed to
// replay events") once the stream's first events were purged (maxEventBytes,
// shared by all sessions) or the stream forgotten (the oldest of a session's
// maxStreamsPerSession: a session's first, after 256 requests), so that a
// client that opened its stream of notifications again (after a network drop:
// a takeover had ended the GET that held it) got none again. r resumes the
// stream after the last event purged, as a Last-Event-ID would, so that the
// events keep their IDs; of a stream forgotten, After replays nothing to such
// a GET (index -1).
func (s *eventStore) fromFirstKept(r *http.Request, sessionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		if l := ss.streams[""]; l != nil && l.first > 0 {
			r.Header.Set("Last-Event-ID", "_"+strconv.Itoa(l.first-1))
		}
	}
}

// SessionClosed implements sdk.EventStore.
func (s *eventStore) SessionClosed(_ context.Context, sessionID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		for _, l := range ss.streams {
			s.forget(l)
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
