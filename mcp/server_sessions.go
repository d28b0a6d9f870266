package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sessions that outlive the process. The SDK keeps an MCP session over Streamable
// HTTP in memory: after a restart of the node, or on another node behind a load
// balancer, a client's next request names a session (Mcp-Session-Id) that the
// server does not know. The spec lets the server answer 404 and the client start a
// new session, but the official clients do not (the Python SDK fails the call
// with "Session terminated", the TypeScript SDK with a StreamableHTTPError 404), so
// every connected client would fail at each restart. Nothing this server keeps per
// session needs the original process: its tools and run_task's tasks live in the
// node (and its log), and a session's state is the client's initialize. So the
// server resumes the session: it starts one under the client's ID itself, with an
// initialize of the protocol version the client names in its MCP-Protocol-Version
// header, sets the log level and resource subscriptions its stream of the log
// records (server_state.go), and then serves the request in it. A run_task
// call's stream cut by the restart is resumed from the log too (server_calls.go).
// What the process held for the session alone is lost: the client's capabilities
// and name (the server asks the client for nothing), and the events of its
// streams other than the answers of run_task and task_result (a cut call of
// another tool, whose outcome the node cannot know, answers a JSON-RPC error
// that says so when its client resumes the stream).

// resumedClient names the client of a resumed session.
const resumedClient = "unknown (session resumed)"

// sessionIDs gives the SDK its session IDs: a new random one, or, while a session
// is resumed, the client's.
type sessionIDs struct {
	mu   sync.Mutex // held from a session's start to its ID's use
	next string     // the ID of the session being resumed

	// resuming holds the sessions being resumed, each with a channel closed at
	// the end: the server knows such a session before the SDK's handler does,
	// so a request in it waits.
	rmu      sync.Mutex
	resuming map[string]chan struct{}
}

// resumed returns when session id is not being resumed, or ctx ends.
func (ids *sessionIDs) resumed(ctx context.Context, id string) {
	ids.rmu.Lock()
	done := ids.resuming[id]
	ids.rmu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// id is the SDK's ServerOptions.GetSessionID.
func (ids *sessionIDs) id() string {
	if ids.next != "" {
		id := ids.next
		ids.next = ""
		return id
	}
	return rand.Text()
}

// serveSessions passes r to the SDK's handler h, first resuming the session r
// names when the server does not know it (and r is not an initialize, which
// starts a session of its own: the SDK answers it 404). A request in a session
// the cap is closing waits for the close and then resumes the session (enter).
// A DELETE of a session the server does not know has nothing to end here: it is
// answered 204. A deleted session is recorded as ended (recordEnded): a request
// in it is answered 404, as the spec says of a terminated session, and not
// resumed.
func (s *Server) serveSessions(h http.Handler, w http.ResponseWriter, r *http.Request) {
	r, forget := s.holdCall(r)
	defer forget()
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		if r.Method == http.MethodPost {
			// The SDK asks for the new session's ID before it answers: hold the
			// IDs until then, so that a resumption does not hand its ID to this one.
			s.ids.mu.Lock()
			once := sync.OnceFunc(s.ids.mu.Unlock)
			h.ServeHTTP(&firstWrite{ResponseWriter: w, before: once}, r)
			once()
			if id := w.Header().Get("Mcp-Session-Id"); id != "" && s.known(id) {
				s.touch(id)
				s.idleFrom(id)
				s.capSessions(id)
			}
			return
		}
		h.ServeHTTP(w, r)
		return
	}
	answers := r.Method == http.MethodPost && onlyAnswers(peekBody(r))
	leave, ok := s.enter(r, id, answers)
	if !ok {
		return // its client left while it waited for the cap's close
	}
	defer leave()
	if s.known(id) {
		s.serveKnown(h, w, r, id, answers)
		return
	}
	var body []byte
	if r.Method == http.MethodPost {
		body = peekBody(r)
	}
	if r.Method == http.MethodPost && isInitialize(body) {
		h.ServeHTTP(w, r)
		return
	}
	// The check that the session was not deleted and its resumption, and a
	// DELETE's record, run one at a time for an ID: a request that found the
	// session not ended does not bring it back live after a DELETE recorded its
	// end meanwhile.
	unlock := s.idLocks.lock(id)
	if s.known(id) { // resumed by a request while this one waited
		unlock()
		s.serveKnown(h, w, r, id, answers)
		return
	}
	if answers && s.closingNow(id) {
		unlock()
		// Answers to the server's requests in a session the cap is closing,
		// which the SDK no longer holds: nothing awaits them (a resumed session
		// sent no request), and a resumption now would run alongside the
		// close's end (enter). Taken, as the SDK takes an answer it awaits no
		// more; the client's next request resumes the session.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if !validSessionID(id) || s.ended(r.Context(), id) {
		unlock()
		// Terminated: the MCP spec has the server answer 404 to a request in a
		// session it terminated, and a client deleted this one.
		sessionNotFound(w, body)
		return
	}
	if s.afterEndedCheck != nil {
		s.afterEndedCheck(r)
	}
	if r.Method == http.MethodDelete {
		// One that another node served, or this one before a restart.
		s.end(r, id)
		unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	err := s.resume(h, r, id)
	unlock()
	if err != nil {
		s.opts.Logger.Warn("mcp server: session not resumed", "session", id, "err", err)
	} else {
		s.touch(id)
		// Its idle timer starts now: a request that holds the session starts it
		// anew once answered, but a GET of the stream of notifications holds
		// none (holds), so that a session resumed by its stream, whose client
		// then hung up, stayed for good.
		s.idleFrom(id)
		// Every resumption runs the cap, a GET's too: a GET in a session ID
		// made up (of the right shape) resumes a session the SDK would then
		// hold for SessionTimeout after its client hung up. The cap leaves the
		// sessions whose client holds a stream (enter counts it), this one's
		// among them: a client whose stream the close ended and that opens it
		// again closes no other client's stream (capSessions). Marked used
		// (touch), the session resumed is the newest: the cap closes first
		// those idle longer.
		s.capSessions(id)
	}
	if answers {
		w = &answersWriter{ResponseWriter: w}
	}
	if !s.resumeCall(w, r, id) {
		h.ServeHTTP(w, r)
	}
}

// serveKnown serves r in session id, which the server holds live. A POST
// holding only answers (answers) is not held by a close of the cap, which may
// wait for them (enter): the SDK may forget the session before its handler
// looks it up, and answer 404, on which the official clients fail for good. It
// is answered 202 instead (answersWriter): nothing waits for an answer in a
// session closed, and the client's next request resumes the session.
func (s *Server) serveKnown(h http.Handler, w http.ResponseWriter, r *http.Request, id string, answers bool) {
	if s.admitted != nil {
		s.admitted(r)
	}
	s.touch(id)
	s.ids.resumed(r.Context(), id)
	if r.Method == http.MethodDelete {
		// The client is done with the session: it ends the calls it left
		// under way, which the SDK's close of the session would leave running,
		// and its ID answers 404 from now on, from this node and from any node
		// that would resume it.
		s.endCalls(id)
		unlock := s.idLocks.lock(id)
		s.end(r, id)
		unlock()
	}
	if answers {
		w = &answersWriter{ResponseWriter: w}
	}
	if !s.resumeCall(w, r, id) {
		h.ServeHTTP(w, r)
	}
}

// idLocks are locks by session ID.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks id, and returns its unlock.
func (l *idLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k := l.locks[id]
	if k == nil {
		k = &idLock{}
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// end records that the client of session id deleted it; a failure is logged (the
// session may then be resumed by a later request in it).
func (s *Server) end(r *http.Request, id string) {
	if err := s.recordEnded(context.WithoutCancel(r.Context()), id); err != nil {
		s.opts.Logger.Warn("mcp server: a deleted session not recorded as ended; a request in it may resume it", "session", id, "err", err)
	}
}

// resume starts a session of id in h, as its client would: an initialize at the
// protocol version r names, and the initialized notification.
func (s *Server) resume(h http.Handler, r *http.Request, id string) error {
	version := r.Header.Get("MCP-Protocol-Version")
	if version == "" {
		version = "2025-03-26" // the version a client that sends no header speaks
	}
	s.ids.mu.Lock()
	if s.known(id) {
		s.ids.mu.Unlock()
		return nil
	}
	// Known from the initialize on: requests that see it known wait for the end.
	done := make(chan struct{})
	s.ids.rmu.Lock()
	if s.ids.resuming == nil {
		s.ids.resuming = map[string]chan struct{}{}
	}
	s.ids.resuming[id] = done
	s.ids.rmu.Unlock()
	defer func() {
		s.ids.rmu.Lock()
		delete(s.ids.resuming, id)
		s.ids.rmu.Unlock()
		close(done)
	}()
	s.ids.next = id
	init, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": &sdk.InitializeParams{
		ProtocolVersion: version, Capabilities: &sdk.ClientCapabilities{}, ClientInfo: &sdk.Implementation{Name: resumedClient, Version: "0"}}})
	rec, err := s.post(h, r, "", "", init)
	s.ids.next = ""
	s.ids.mu.Unlock()
	if err != nil {
		return err
	}
	if got := rec.header.Get("Mcp-Session-Id"); rec.status != http.StatusOK || got != id {
		return fmt.Errorf("initialize answered %d, session %q: %s", rec.status, got, strings.TrimSpace(rec.body.String()))
	}
	negotiated := version
	if i := bytes.Index(rec.body.Bytes(), []byte(`"protocolVersion":"`)); i >= 0 {
		rest := rec.body.Bytes()[i+len(`"protocolVersion":"`):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			negotiated = string(rest[:j])
		}
	}
	rec, err = s.post(h, r, id, negotiated, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return err
	}
	if rec.status != http.StatusAccepted {
		return fmt.Errorf("notifications/initialized answered %d: %s", rec.status, strings.TrimSpace(rec.body.String()))
	}
	s.restore(h, r, id, negotiated)
	s.opts.Logger.Info("mcp server: session resumed", "session", id, "protocol", negotiated)
	return nil
}

// restore sets the log level and the subscriptions of session id that its stream
// of the log records, as its client did: logging/setLevel and resources/subscribe
// requests in the session. What fails (a resource no longer offered) is logged.
func (s *Server) restore(h http.Handler, r *http.Request, id, version string) {
	st, err := s.book.state(context.WithoutCancel(r.Context()), id)
	if err != nil {
		s.opts.Logger.Warn("mcp server: the session's log level and subscriptions not restored", "session", id, "err", err)
		return
	}
	var reqs []map[string]any
	if st.level != "" {
		reqs = append(reqs, map[string]any{"method": "logging/setLevel", "params": map[string]any{"level": st.level}})
	}
	for _, uri := range st.subs {
		reqs = append(reqs, map[string]any{"method": "resources/subscribe", "params": map[string]any{"uri": uri}})
	}
	for i, req := range reqs {
		req["jsonrpc"], req["id"] = "2.0", i+2
		body, _ := json.Marshal(req)
		rec, err := s.post(h, r, id, version, body)
		if err == nil && (rec.status != http.StatusOK || bytes.Contains(rec.body.Bytes(), []byte(`"error":`))) {
			err = fmt.Errorf("answered %d: %s", rec.status, strings.TrimSpace(rec.body.String()))
		}
		if err != nil {
			s.opts.Logger.Warn("mcp server: a resumed session's state not restored", "session", id, "request", req["method"], "params", req["params"], "err", err)
		}
	}
}

// post sends body to h as a POST like r (its host, and the values of its
// context: not its cancellation, the session outlives r, nor its note as a
// stream's writer: the streams post opens, the session's stream of
// notifications among them, are not r's to write), in session id at protocol
// version when given, and records the answer.
func (s *Server) post(h http.Handler, r *http.Request, id, version string, body []byte) (*recorder, error) {
	ctx := context.WithValue(context.WithoutCancel(r.Context()), writerKey{}, (*streamWriter)(nil))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Host = r.Host
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
	}
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	h.ServeHTTP(rec, req)
	return rec, nil
}

// recorder is the http.ResponseWriter of resume's requests.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header         { return w.header }
func (w *recorder) WriteHeader(status int)      { w.status = status }
func (w *recorder) Write(p []byte) (int, error) { return w.body.Write(p) }
func (w *recorder) Flush()                      {}

// firstWrite calls before once, ahead of the first thing written.
type firstWrite struct {
	http.ResponseWriter
	before func()
}

func (w *firstWrite) WriteHeader(status int) { w.before(); w.ResponseWriter.WriteHeader(status) }
func (w *firstWrite) Write(p []byte) (int, error) {
	w.before()
	return w.ResponseWriter.Write(p)
}
func (w *firstWrite) Flush() {
	w.before()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}
func (w *firstWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answersWriter is the http.ResponseWriter of a POST holding only answers, in a
// session that may be gone by the time the SDK's handler looks it up: it
// answers 202, with no body, where the SDK answers 404 (session not found).
type answersWriter struct {
	http.ResponseWriter
	gone bool // the SDK answered 404: what it writes next is dropped
}

func (w *answersWriter) WriteHeader(status int) {
	if status == http.StatusNotFound {
		w.gone = true
		h := w.ResponseWriter.Header()
		h.Del("Content-Type")
		h.Del("Content-Length")
		h.Del("X-Content-Type-Options")
		status = http.StatusAccepted
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *answersWriter) Write(p []byte) (int, error) {
	if w.gone {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *answersWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *answersWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// peekBody returns r's body, and leaves it to be read again.
func peekBody(r *http.Request) []byte {
	if r.Body == nil {
		return nil
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body
}

// isInitialize reports whether body is an initialize request (alone or in a
// batch).
func isInitialize(body []byte) bool {
	var one struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &one) == nil {
		return one.Method == "initialize"
	}
	var batch []struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &batch) == nil {
		for _, m := range batch {
			if m.Method == "initialize" {
				return true
			}
		}
	}
	return false
}

// codeSessionNotFound is the JSON-RPC error code of a request in a session the
// server does not have (the TypeScript SDK's server answers it).
const codeSessionNotFound = -32001

// sessionNotFound answers a request of body (nil: a GET or DELETE) in a session
// the server does not have and will not resume: 404, as the SDK's handler answers,
// with a JSON-RPC error of the request's id, "session not found", as the rest of
// the server's refusals, where the SDK's is plain text.
func sessionNotFound(w http.ResponseWriter, body []byte) {
	var one struct{ ID json.RawMessage }
	_ = json.Unmarshal(body, &one)
	writeRPCErrorID(w, http.StatusNotFound, codeSessionNotFound, "session not found", one.ID)
}

// validSessionID reports whether id has the shape of the IDs the server makes
// (crypto/rand.Text's: 26 letters of base32's alphabet, A-Z and 2-7), the only
// ones it resumes: an ID a client made up (a path, a name of its choosing) is a
// session not found, as the SDK answers.
func validSessionID(id string) bool {
	if len(id) != sessionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if (id[i] < 'A' || id[i] > 'Z') && (id[i] < '2' || id[i] > '7') {
			return false
		}
	}
	return true
}

// sessionIDLen is the length of crypto/rand.Text's strings.
const sessionIDLen = 26
