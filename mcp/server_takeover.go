package mcp

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A stream of a session over Streamable HTTP (a POST's answer, or a GET that
// resumed one) has one writer at a time, the request that serves it; the SDK
// answers a GET that resumes a stream still written to (Last-Event-ID) with 409
// Conflict. A client whose connection died without the server seeing it go (a
// network that dropped it, a proxy that lost it, a laptop that slept) resumes at
// once, while the server writes on into the dead connection's buffers until TCP
// gives up, minutes later; the SDKs try a resumption two or three times, seconds
// apart, and give the call up on 409. So a GET that resumes a stream takes it
// over: the request still writing it is ended (as a client's hang-up ends it: its
// call goes on, its events are kept), and the GET replays what came after the
// client's last event and follows the stream from there. Only a client that knows
// the session's ID and an event ID of the stream can resume it. A GET of the
// session's stream of notifications without a Last-Event-ID takes that stream
// over the same way (gotStream): only a client that knows the session's ID can
// open it.

// takeoverWait bounds how long a resumption waits for the request it takes a
// stream from to end.
const takeoverWait = 5 * time.Second

// streamKey names a stream of a session.
type streamKey struct{ session, stream string }

// streamWriter is a request that may write a stream: done is closed when it is
// served, and cancel ends it.
type streamWriter struct {
	cancel context.CancelFunc
	// rc sets the request's write deadline: a takeover sets it in the past, so
	// that a write stuck in a dead connection's full buffers fails at once
	// rather than after ServerOptions.WriteTimeout, holding the SDK's stream
	// meanwhile (the resumption would wait for it, and be answered 409).
	rc *http.ResponseController
	// taken is set once a resumption took the request's stream over.
	taken atomic.Bool
	// prev is the request it took its stream from, until that one (and those
	// before it) ended (await).
	prev  atomic.Pointer[streamWriter]
	done  chan struct{}
	owner *Server
	// session is the Mcp-Session-Id of the request.
	session string
	// user is the user its token names (auth.TokenInfo's UserID), when a
	// handler in front of the server's checks tokens.
	user string

	mu sync.Mutex
	// keys are the streams it was noted as writing: the one its POST opened, or
	// its GET resumed, and those of a session it resumed (resume: the session's
	// stream of notifications, its initialize's), all forgotten when it ends.
	keys []streamKey
}

type writerKey struct{}

// claimStream makes r a stream's writer for the time it is served: a POST
// becomes the writer of the stream the SDK opens for its answer (Open), and a GET
// that resumes a stream (Last-Event-ID) takes it over from the request that
// writes it now, ending that one first, and so does a GET of the session's
// stream of notifications (gotStream). release, called once r is served,
// forgets it.
func (s *Server) claimStream(r *http.Request, rc *http.ResponseController, session string) (*http.Request, *streamWriter, func()) {
	ctx, cancel := context.WithCancel(r.Context())
	wr := &streamWriter{cancel: cancel, rc: rc, done: make(chan struct{}), owner: s, session: session}
	if info := auth.TokenInfoFromContext(r.Context()); info != nil {
		wr.user = info.UserID
	}
	if r.Method == http.MethodGet {
		if stream, ok := gotStream(r); ok {
			k := streamKey{session, stream}
			if prev, ok := s.takeOver(k, wr); ok {
				wr.await(ctx, prev)
			}
			if len(r.Header.Values("Last-Event-ID")) == 0 {
				s.events.fromFirstKept(r, session)
			}
		}
	}
	r = r.WithContext(context.WithValue(ctx, writerKey{}, wr))
	return r, wr, func() {
		s.forgetWriter(wr)
		close(wr.done)
		cancel()
	}
}

// gotStream names the stream a GET asks for: the one of the event its
// Last-Event-ID names, or without one the session's stream of notifications
// ("", as the SDK names it). A client whose stream of notifications died unseen
// opens it again without a Last-Event-ID (the SDKs do, after a network drop)
// and takes it over as a resumption does: the SDK answered 409 Conflict while
// the dead connection's GET lingered, and the client got no notifications
// again. false: a Last-Event-ID that names no event (the SDK answers 400), or
// a GET the SDK refuses before it looks at the stream (servable).
func gotStream(r *http.Request) (string, bool) {
	if !servable(r) {
		return "", false
	}
	if len(r.Header.Values("Last-Event-ID")) == 0 {
		return "", true
	}
	stream, _, ok := parseEventID(r.Header.Get("Last-Event-ID"))
	return stream, ok
}

// servable reports whether the SDK serves GET r a stream, as far as its headers
// tell: it refuses one whose Accept does not take text/event-stream, or whose
// MCP-Protocol-Version it does not speak, with 400, and a request it refuses
// takes no stream over: else a client's GET sent with the wrong headers (or
// anyone's who knows the session's ID, on a server without tokens) ended the
// client's stream of notifications, and got no stream either.
func servable(r *http.Request) bool {
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !slices.Contains(sdk.SupportedProtocolVersions(), v) {
		return false
	}
	for _, value := range r.Header.Values("Accept") {
		for item := range strings.SplitSeq(value, ",") {
			base, _, _ := strings.Cut(item, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "text/event-stream", "text/*", "*/*":
				return true
			}
		}
	}
	return false
}

// await ends prev, the request wr took its stream from, and waits, up to
// takeoverWait, for it to end. A request that had itself taken the stream over
// and still waited for the one it took it from (two resumptions at once) is
// ended before it got the stream: wr waits for the one that request waited for
// too, and so on down the line. Else the later resumption, ended with nothing to
// wait for, reached the SDK while the request that still wrote the stream held it
// and was answered 409 Conflict, as the earlier one was: neither got the stream.
func (wr *streamWriter) await(ctx context.Context, prev *streamWriter) {
	t := time.NewTimer(takeoverWait)
	defer t.Stop()
	for p := prev; p != nil; p = p.prev.Load() {
		p.taken.Store(true)
		_ = p.rc.SetWriteDeadline(time.Unix(1, 0))
		p.cancel()
		select {
		case <-p.done:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
	// Every request before it ended: none holds the stream.
	wr.prev.Store(nil)
}

// errTakenOver is the error of a write of a request whose stream a resumption
// took over.
var errTakenOver = errors.New("the stream was taken over by a resumption")

// takenOver reports whether a resumption took wr's stream over (false for nil).
func (wr *streamWriter) takenOver() bool { return wr != nil && wr.taken.Load() }

// takeOver makes wr the writer of stream k, and returns the request that wrote
// it, if any. A stream of a session that belongs to a user (the SDK refuses a
// request in it with another user's token, 403) is not taken from a request of
// that user by one of another: it stays with its writer.
func (s *Server) takeOver(k streamKey, wr *streamWriter) (*streamWriter, bool) {
	for {
		v, ok := s.writers.Load(k)
		if !ok {
			wr.prev.Store(nil)
			if _, loaded := s.writers.LoadOrStore(k, wr); loaded {
				continue
			}
			wr.keys = append(wr.keys, k)
			return nil, false
		}
		prev := v.(*streamWriter)
		if prev.user != "" && prev.user != wr.user {
			wr.prev.Store(nil)
			return nil, false
		}
		// Set before wr is seen as the stream's writer: a request that takes
		// the stream from wr waits for prev too.
		wr.prev.Store(prev)
		if s.writers.CompareAndSwap(k, prev, wr) {
			wr.keys = append(wr.keys, k)
			return prev, true
		}
	}
}

// opened notes, from the context of the request that opens a stream (Open), that
// it writes the stream.
func opened(ctx context.Context, sessionID, streamID string) {
	wr, _ := ctx.Value(writerKey{}).(*streamWriter)
	if wr == nil {
		return
	}
	k := streamKey{sessionID, streamID}
	wr.mu.Lock()
	wr.keys = append(wr.keys, k)
	wr.mu.Unlock()
	wr.owner.writers.Store(k, wr)
}

// forgetWriter forgets the streams wr was noted as writing, but those a
// resumption took from it since.
func (s *Server) forgetWriter(wr *streamWriter) {
	wr.mu.Lock()
	keys := wr.keys
	wr.keys = nil
	wr.mu.Unlock()
	for _, k := range keys {
		s.writers.CompareAndDelete(k, wr)
	}
}
