package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// What a client asked of its session over Streamable HTTP, kept in the node's
// event log so that it outlives the process: its log level (logging/setLevel), its
// resource subscriptions, and the run_task calls it made. Each session is a stream
// of the log, eventlog.MCPSessionStreamPrefix + its ID, whose events
// (messages.MCPLevelSet, MCPSubscribed, MCPUnsubscribed, MCPCallStarted,
// MCPSessionKept, MCPSessionEnded) fold into a sessionState; the streams of sessions that ended
// or expired are pruned (server_prune.go). A node that resumes the session (server_sessions.go) folds the
// stream and sets the level and subscriptions again; a client that resumes a cut
// run_task stream on another process, or sends the call again, gets the task's
// result rather than a second run (server_calls.go).

// maxSubscriptions bounds the resources one session may subscribe to; a
// subscription past it is refused with a JSON-RPC invalid-params error.
const maxSubscriptions = 64

// maxSubscriptionURI bounds the URI of a subscription, in bytes.
const maxSubscriptionURI = 2048

// maxCalls bounds the run_task and task_result calls a session's state remembers
// (the latest): an older call sent again runs again. maxToolCalls bounds, apart,
// the calls of the node's other tools it remembers, whose record only says that a
// restart cut them off: a client calling tools many times does not push a task's
// call out, which would run its task a second time when sent again.
const (
	maxCalls     = 256
	maxToolCalls = 16
)

// maxStates bounds the sessions whose state the server keeps in memory; past it
// the states are dropped, and read from the log again when needed.
const maxStates = 4096

// sessionLog is a Node with an event log (*node.Node): the server keeps its
// clients' sessions there.
type sessionLog interface {
	Log() eventlog.Log
}

// sessionState is the fold of a session's stream.
type sessionState struct {
	seq   uint64   // the stream's last event
	ts    int64    // its time, Unix microseconds
	level string   // "" until the client sets one
	subs  []string // the subscribed URIs, in the order of subscription
	calls []callRecord
	ended bool // its client deleted it (messages.MCPSessionEnded)
}

// callRecord is a call of a session's stream, with the time it was recorded.
type callRecord struct {
	messages.MCPCallStarted
	ts int64 // Unix microseconds
}

func (st *sessionState) apply(e messages.Envelope) {
	st.seq, st.ts = e.Seq, e.TS
	p, err := e.Decode()
	if err != nil {
		return
	}
	switch p := p.(type) {
	case *messages.MCPLevelSet:
		st.level = p.Level
	case *messages.MCPSubscribed:
		if !slices.Contains(st.subs, p.URI) {
			st.subs = append(st.subs, p.URI)
		}
	case *messages.MCPUnsubscribed:
		st.subs = slices.DeleteFunc(st.subs, func(u string) bool { return u == p.URI })
	case *messages.MCPCallStarted:
		st.calls = append(st.calls, callRecord{*p, e.TS})
		st.trimCalls()
	case *messages.MCPSessionEnded:
		st.ended = true
	}
}

// trimCalls keeps the latest maxCalls calls that started or wait for a task and
// the latest maxToolCalls others, in their order.
func (st *sessionState) trimCalls() {
	tasks, others := 0, 0
	for _, c := range st.calls {
		if c.TaskSession != "" {
			tasks++
		} else {
			others++
		}
	}
	if tasks <= maxCalls && others <= maxToolCalls {
		return
	}
	dropTasks, dropOthers := max(tasks-maxCalls, 0), max(others-maxToolCalls, 0)
	st.calls = slices.DeleteFunc(st.calls, func(c callRecord) bool {
		switch {
		case c.TaskSession != "" && dropTasks > 0:
			dropTasks--
			return true
		case c.TaskSession == "" && dropOthers > 0:
			dropOthers--
			return true
		}
		return false
	})
}

// call returns the latest call of the session with request ID id, or whose
// stream is stream (when id is empty).
func (st *sessionState) call(id, stream string) (callRecord, bool) {
	for _, c := range slices.Backward(st.calls) {
		if id != "" && c.RequestID == id || id == "" && stream != "" && c.Stream == stream {
			return c, true
		}
	}
	return callRecord{}, false
}

// sessionBook keeps the sessions' states, in the log when the node has one (else
// in memory only). It is safe for concurrent use. The calls of one session take
// turns (sessionLock), from the read of its stream to the append that follows:
// the latter is decided on the former. Those of different sessions do not wait
// for one another: a durable append (milliseconds; tens of them on ClickHouse)
// holds its session only, and mu is held only to look a state or a lock up.
type sessionBook struct {
	log eventlog.Log // nil: in memory only

	mu     sync.Mutex
	states map[string]*sessionState // each read and changed under its session's lock
	locks  map[string]*sessionLock  // those of the sessions in use, no other
}

// sessionLock is the lock of one session, in the book while held or waited for:
// the last to unlock it removes it, so that the book keeps as many as calls are
// under way, however many sessions come and go. It is apart from the session's
// state, which the book may drop (maxStates, forget) while it is in use.
type sessionLock struct {
	mu    sync.Mutex
	users int // holders and waiters; guarded by sessionBook.mu
}

func newSessionBook(n Node) *sessionBook {
	var log eventlog.Log
	if l, ok := n.(sessionLog); ok {
		log = l.Log()
	}
	return newBook(log)
}

// newBook returns a book of the sessions in log (nil: in memory only).
func newBook(log eventlog.Log) *sessionBook {
	return &sessionBook{log: log, states: map[string]*sessionState{}, locks: map[string]*sessionLock{}}
}

func sessionStream(id string) string { return eventlog.MCPSessionStreamPrefix + id }

// lock waits for session id's turn and returns the function that ends it.
func (b *sessionBook) lock(id string) (unlock func()) {
	b.mu.Lock()
	l := b.locks[id]
	if l == nil {
		l = &sessionLock{}
		b.locks[id] = l
	}
	l.users++
	b.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		b.mu.Lock()
		if l.users--; l.users == 0 {
			delete(b.locks, id)
		}
		b.mu.Unlock()
	}
}

// state returns a copy of the state of session id, read from the log unless
// known.
func (b *sessionBook) state(ctx context.Context, id string) (sessionState, error) {
	defer b.lock(id)()
	st, err := b.load(ctx, id)
	if err != nil {
		return sessionState{}, err
	}
	return sessionState{seq: st.seq, ts: st.ts, level: st.level, subs: slices.Clone(st.subs), calls: slices.Clone(st.calls), ended: st.ended}, nil
}

// load returns session id's state, caught up with its stream: what other nodes
// (behind one load balancer, without sticky sessions) recorded since this one
// last read it counts too, so that a call one of them recorded is known here
// when the client sends it again to this node. The caller holds id's lock
// (lock), which the state is read and changed under; the read of the log holds
// no other.
func (b *sessionBook) load(ctx context.Context, id string) (*sessionState, error) {
	b.mu.Lock()
	st, ok := b.states[id]
	b.mu.Unlock()
	if !ok {
		st = &sessionState{}
	}
	if b.log != nil {
		events, err := b.log.Read(ctx, sessionStream(id), st.seq+1)
		if err != nil {
			return nil, fmt.Errorf("read MCP session %s: %w", id, err)
		}
		for _, e := range events {
			st.apply(e)
		}
	}
	if !ok {
		b.mu.Lock()
		if len(b.states) >= maxStates {
			clear(b.states) // a state in use goes on being used, and is read again next time
		}
		b.states[id] = st
		b.mu.Unlock()
	}
	return st, nil
}

// drop forgets session id's state: it is read from the log again when needed.
func (b *sessionBook) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.states, id)
}

// forget drops the states the book keeps in memory (some of whose streams were
// pruned): they are read from the log again when needed.
func (b *sessionBook) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.states)
}

// record appends p to session id's stream, unless decide, given the state now,
// says it changes nothing (or returns an error, which record returns). A
// conflict (another node wrote the stream meanwhile) reads it again and decides
// again. The records of one session take turns; those of others go on meanwhile.
func (b *sessionBook) record(ctx context.Context, id string, decide func(*sessionState) (messages.Payload, error)) error {
	defer b.lock(id)()
	for attempt := 0; ; attempt++ {
		st, err := b.load(ctx, id)
		if err != nil {
			return err
		}
		p, err := decide(st)
		if err != nil || p == nil {
			return err
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			return err
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "mcp-"+rand.Text(), sessionStream(id), st.seq+1, time.Now().UnixMicro(), "mcp/server"
		if b.log != nil {
			if err := b.log.Append(ctx, []messages.Envelope{e}); err != nil {
				if errors.Is(err, eventlog.ErrSeqConflict) && attempt < 3 {
					b.drop(id)
					continue
				}
				return fmt.Errorf("record MCP session %s: %w", id, err)
			}
		}
		st.apply(e)
		return nil
	}
}

// logLevels are the levels of MCP's logging/setLevel (RFC 5424's, by name).
var logLevels = []sdk.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// recordLevel is the receiving middleware that records a session's
// logging/setLevel once the SDK has taken it. A level that is none of
// logLevels is refused (invalid params) before the SDK sees it: the SDK took
// any string, and the session's stream recorded it, whatever its size.
func (s *Server) recordLevel(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if params, ok := req.GetParams().(*sdk.SetLoggingLevelParams); ok && method == "logging/setLevel" && !slices.Contains(logLevels, params.Level) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("invalid params: the level %.40q is none of %v", params.Level, logLevels)}
		}
		res, err := next(ctx, method, req)
		if err != nil || method != "logging/setLevel" {
			return res, err
		}
		id := req.GetSession().ID()
		params, ok := req.GetParams().(*sdk.SetLoggingLevelParams)
		if id == "" || !ok {
			return res, nil
		}
		level := string(params.Level)
		if err := s.book.record(ctx, id, func(st *sessionState) (messages.Payload, error) {
			if st.level == level {
				return nil, nil
			}
			return &messages.MCPLevelSet{Level: level}, nil
		}); err != nil {
			s.opts.Logger.Warn("mcp server: log level not recorded", "session", id, "err", err)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the log level is set, but could not be recorded to outlive a restart of the node: " + err.Error()}
		}
		return res, nil
	}
}

// recordSubscribe records session id's subscription to uri, refused past
// maxSubscriptions.
func (s *Server) recordSubscribe(ctx context.Context, id, uri string) error {
	if id == "" {
		return nil
	}
	return s.book.record(ctx, id, func(st *sessionState) (messages.Payload, error) {
		switch {
		case slices.Contains(st.subs, uri):
			return nil, nil
		case len(st.subs) >= maxSubscriptions:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"too many subscriptions: this session has %d, the most the server keeps; unsubscribe from one first", len(st.subs))}
		}
		return &messages.MCPSubscribed{URI: uri}, nil
	})
}

// recordUnsubscribe records the end of session id's subscription to uri.
func (s *Server) recordUnsubscribe(ctx context.Context, id, uri string) error {
	if id == "" {
		return nil
	}
	return s.book.record(ctx, id, func(st *sessionState) (messages.Payload, error) {
		if !slices.Contains(st.subs, uri) {
			return nil, nil
		}
		return &messages.MCPUnsubscribed{URI: uri}, nil
	})
}

// recordEnded records that the client of session id deleted it: the server
// answers 404 to a request in it from then on, where it would resume it.
func (s *Server) recordEnded(ctx context.Context, id string) error {
	return s.book.record(ctx, id, func(st *sessionState) (messages.Payload, error) {
		if st.ended {
			return nil, nil
		}
		return &messages.MCPSessionEnded{}, nil
	})
}

// ended reports whether the client of session id deleted it (recordEnded). A
// stream that cannot be read is taken for a session not ended: it is resumed,
// as before the record was kept.
func (s *Server) ended(ctx context.Context, id string) bool {
	st, err := s.book.state(ctx, id)
	if err != nil {
		s.opts.Logger.Warn("mcp server: whether the session was deleted is not known; it is resumed", "session", id, "err", err)
		return false
	}
	return st.ended
}

// argsHash is the hex SHA-256 of a call's arguments.
func argsHash(raw string) string {
	h := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(h[:])
}
