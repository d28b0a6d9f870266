package node

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/ssekeepalive"
	"github.com/troupe-run/troupe/messages"
)

// maxBody bounds a request body; the input itself is bounded by Task.Validate.
const maxBody = 2 << 20

// Handler returns the node's HTTP API: the routes of its route table (Routes),
// each with its body bound, behind CORS, the bearer token and the rate limit
// (HTTPConfig.Auth, HTTPConfig.CORS):
//
//	POST /v1/tasks                     submit a task → 202 {"session_id"}
//	GET  /v1/sessions                  list sessions (?limit, status, since; detail=true adds agent, usage and waiting)
//	GET  /v1/feed/sessions           the node's session changes as Server-Sent Events (sessfeed.go)
//	GET  /v1/sessions/{id}             status, output, error, calls waiting for approval
//	GET  /v1/sessions/{id}/events      the session's events in seq order
//	GET  /v1/sessions/{id}/stream      the same as Server-Sent Events, live, with model.delta increments
//	POST /v1/sessions/{id}/cancel      cancel the running task, or {"task_id"} a queued one
//	POST /v1/sessions/{id}/approvals/{call}  answer a call's approval {"approve", "reason"}
//	GET  /v1/approvals                 the calls waiting for approval (approvals.go)
//	GET  /v1/stats                     the figures of replay stats (?since, agent; stats.go)
//	GET  /ui/                          the web dashboard (ui.go)
//	POST /v1/auth/login, /v1/auth/logout  the dashboard's session cookie (uisession.go)
//	GET  /metrics                      Prometheus metrics
//	GET  /healthz                      200 {"status":"ok"}, 200 {"status":"degraded","reason"} (on Kafka, the log cannot write), or 503 {"status":"unhealthy","reason"} (a full disk, Kafka unreachable included)
//	GET  /livez                        the same, but 503 only when the node is stopping or its session host is stuck
//	GET  /openapi.json                 the OpenAPI document of these routes (openapi.go)
//	POST /v1/memories                  write memories (with Config.Memory; memory.go)
//	GET  /v1/memories/search           search a namespace
//	GET  /v1/memories/{id}/history     where a memory came from, why it changed
//	/v1/kb/...                         knowledge bases (with Config.Knowledge; knowledge.go)
//	/.well-known/agent-card.json, /a2a  A2A (with Config.A2A; a2a.go)
//
// and the handlers added with Handle and HandleRoute (node serve adds MCP at /mcp).
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	rpc := map[string]bool{} // the paths of the routes that speak JSON-RPC
	for _, r := range n.Routes() {
		mux.Handle(r.Pattern(), limitBody(cmp.Or(r.MaxBody, n.cfg.HTTP.MaxBody), r.MaxBody == 0, r.Handler))
		if r.JSONRPC {
			rpc[r.Path] = true
		}
	}
	routed := jsonUnrouted(mux)
	if n.tracing.on() {
		// A client's traceparent header parents what its request starts (a task's
		// spans, over POST /v1/tasks, A2A or MCP).
		routed = withTraceparent(routed)
	}
	return answerUnread(noSniff(n.gate.wrap(routed, rpc)))
}

// noSniff has every answer forbid the browser to guess its type from its body
// (X-Content-Type-Options: nosniff): an answer holds what tasks, models and tools
// said (hostile text among it), and one opened directly in a browser must stay
// the JSON or event stream it says it is, never be taken for a page. The
// dashboard's files (ui.go) set it too, being served by their own handler.
func noSniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// answerUnread serves h so that an answer given before the request's body was read
// to its end (a refusal before the body: 401, 403, 404, 405, 413, 415, 429, …, by
// the gate, a route or a handler mounted with Handle) goes out at once, and closes
// the connection (Connection: close). net/http would otherwise read and discard up
// to 256 KiB of what is left of the body before it wrote the answer, so that a
// client that sends its body slowly (a bad link, a slowloris) got its refusal only
// once it had sent it all, or at the read timeout, with no answer. An answer given
// with the body read to its end, or to a request with none, keeps the connection
// for the next request. HTTP/2 answers at once anyway, and keeps its connection.
func answerUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		orig := r.Body
		body := &watchedBody{ReadCloser: orig}
		r.Body = body
		a := &unreadAnswer{ResponseWriter: w, body: body}
		h.ServeHTTP(a, r)
		a.settle() // a handler that wrote nothing is answered 200 by net/http
		// net/http looks at the request's body once the handler returned: one it
		// closed early (more than 256 KiB left unread) has the connection shut
		// for writing and closed only half a second later, so that the client
		// reads the answer before the reset of the unread data.
		r.Body = orig
	})
}

// watchedBody is a request body that knows whether it was read to its end.
type watchedBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.read.Store(true)
	}
	return n, err
}

// unreadAnswer adds Connection: close to an answer begun before its request's
// body was read to its end (answerUnread).
type unreadAnswer struct {
	http.ResponseWriter
	body    *watchedBody
	settled bool
}

// settle adds Connection: close to the answer's headers, before they are written,
// when the body is not read to its end.
func (a *unreadAnswer) settle() {
	if a.settled {
		return
	}
	a.settled = true
	if !a.body.read.Load() {
		a.ResponseWriter.Header().Set("Connection", "close")
	}
}

func (a *unreadAnswer) WriteHeader(code int) {
	if code >= 200 { // an informational answer (1xx) is not the answer
		a.settle()
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *unreadAnswer) Write(p []byte) (int, error) {
	a.settle()
	return a.ResponseWriter.Write(p)
}

// Flush implements http.Flusher (a live stream's handler asks for one).
func (a *unreadAnswer) Flush() {
	a.settle()
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *unreadAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// jsonUnrouted serves mux, answering the requests no route takes as every other
// refusal of the API is answered, in JSON: 404 for a path no route has, 405 (with
// the Allow header) for a method the path's routes do not take. http.ServeMux
// would answer them in plain text.
func jsonUnrouted(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: the mux's own handler says which refusal (and which methods
		// the path takes); its plain-text body is dropped.
		rec := &unroutedAnswer{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		switch rec.code {
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "%s is not served at %s; it takes %s", r.Method, r.URL.Path, allow)
		default:
			writeError(w, http.StatusNotFound, "no route %s %s (the routes: GET /openapi.json)", r.Method, r.URL.Path)
		}
	})
}

// unroutedAnswer keeps the status and headers of http.ServeMux's answer to a
// request no route takes, and drops its body.
type unroutedAnswer struct {
	header http.Header
	code   int
}

func (a *unroutedAnswer) Header() http.Header         { return a.header }
func (a *unroutedAnswer) Write(b []byte) (int, error) { return len(b), nil }
func (a *unroutedAnswer) WriteHeader(code int)        { a.code = code }

// limitBody bounds the request body of h: reading past max fails
// (http.MaxBytesReader), and when answer is set a Content-Length above max is
// answered 413 at once (a route with a bound of its own says why itself).
func limitBody(max int64, answer bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answer && r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d, the most this route takes", r.ContentLength, max)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		h.ServeHTTP(w, r)
	})
}

// ReloadTokens reads HTTPConfig.Auth.TokensFile again (node serve does on SIGHUP):
// its tokens and Auth.Tokens are then the ones accepted. On an error the tokens
// stay as they were.
func (n *Node) ReloadTokens() error { return n.gate.reload() }

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeRPCRefusal answers a request to a route that speaks JSON-RPC (Route.JSONRPC)
// that the gate refused, at status code, with a JSON-RPC error (invalid request,
// id null: the body is not read) whose message says why.
func writeRPCRefusal(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32600, "message": fmt.Sprintf(format, args...)}})
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	if code == http.StatusRequestTimeout {
		// The body's read deadline (HTTPConfig.ReadTimeout and MinBodyRate)
		// passed: the write deadline, set when the headers were read, passed
		// about then or before (both are 30 s by default, and a paced body's
		// read deadline moves past it), and the 408 would be cut, the client left
		// with a closed connection and no reason.
		answerLate(w)
	}
	writeJSON(w, code, apiError{Error: fmt.Sprintf(format, args...)})
}

// answerLate gives the answer to a request whose body came too slowly, or that
// waited for a session (up to Config.SubmitTimeout), a write deadline of its own
// (lateAnswerTimeout from now).
func answerLate(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(lateAnswerTimeout))
}

// lateAnswerTimeout bounds writing a 408.
const lateAnswerTimeout = 5 * time.Second

func (n *Node) postTask(w http.ResponseWriter, r *http.Request) {
	// JSON only: a web page can send text/plain or a form cross-site without asking
	// (no CORS preflight), and a node on localhost must not run what it sends.
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	if r.ContentLength > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", maxBody)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", maxBody)
		case errors.As(err, &netErr) && netErr.Timeout():
			writeError(w, http.StatusRequestTimeout, "the request body was not sent in time")
		default:
			writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
		}
		return
	}
	// A body that is not UTF-8 is refused by the ingress, as from every source.
	// With an Idempotency-Key, the same request sent again (its answer lost, say) is
	// the same task of the same session, run once.
	key, err := headerIdempotencyKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	sub, err := n.SubmitFrom(r.Context(), Arrival{Source: SourceHTTP, Payload: body, IdempotencyKey: key})
	// The submission waits for the session to record the task, up to
	// Config.SubmitTimeout, which is about the write timeout: the answer must
	// still reach the client.
	answerLate(w)
	switch {
	case errors.Is(err, ErrBadTask):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, actors.ErrQueueFull):
		// Nothing was recorded: the queue drains as its tasks run.
		w.Header().Set("Retry-After", strconv.Itoa(queueFullRetryAfter))
		writeError(w, http.StatusTooManyRequests, "the task was not accepted: %v", err)
	case errors.Is(err, actors.ErrSessionFailed):
		writeError(w, http.StatusInternalServerError, "the task was not accepted: %v", err)
	case errors.Is(err, ErrBusUnreachable):
		// Nothing was recorded: the node finds the brokers again within
		// seconds of their return.
		w.Header().Set("Retry-After", strconv.Itoa(busDownRetryAfter))
		writeError(w, http.StatusServiceUnavailable, "the task was not accepted: %v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "the task was not accepted: %v", err)
	default:
		writeJSON(w, http.StatusAccepted, sub)
	}
}

// queueFullRetryAfter is the Retry-After, in seconds, of a task refused because
// its session's queue is full (actors.ErrQueueFull).
const queueFullRetryAfter = 5

// headerIdempotencyKey is the request's Idempotency-Key header, "" when it has
// none. A request that carries the header asks to be acted on once however often it
// is sent, so a key that cannot serve is an error, never taken for no key: an empty
// one (a client whose key came out blank) made each retry a new request, acted on
// again; and the header is a single value (a Structured Field Item), of which
// Header.Get took the first of two, where a proxy or a server behind it may take
// the last, or both joined with a comma. The joined form is refused as two
// headers are (a proxy that merged "a" and "a" into "a, a" sent two keys, and
// one that merged "a" and "b" an ambiguous one): before, it was taken as the
// literal key "a, a", which the request sent again without the proxy did not
// match. A comma inside a quoted string (the Item's form of a string) is the
// key's own.
func headerIdempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values("Idempotency-Key")
	switch {
	case len(keys) == 0:
		return "", nil
	case len(keys) > 1:
		return "", fmt.Errorf("the request has %d Idempotency-Key headers: send one", len(keys))
	case strings.TrimSpace(keys[0]) == "":
		return "", errors.New("the Idempotency-Key header is empty: send a key (such as a UUID), or leave the header out")
	}
	if n := listMembers(keys[0]); n > 1 {
		return "", fmt.Errorf("the Idempotency-Key header %s is a list of %d values, as a proxy joins headers given more than once: send one key, without a comma", QuoteHead(keys[0]), n)
	}
	return keys[0], nil
}

// listMembers is the number of members of a header's value read as a
// comma-separated list (RFC 9110, section 5.3: how headers given more than once
// are joined), a comma inside a quoted string (with its backslash escapes) being
// no separator. A quoted string is a whole member: a quote opens one only at a
// member's start (after its spaces), and one that never closes opens none (a
// key "a with a quote in it, joined with b, is two members, as key"a and b are).
func listMembers(v string) int {
	n, quoted, start := 1, false, true
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case quoted && c == '"':
			quoted = false
		case quoted:
		case c == ',':
			n, start = n+1, true
		case start && c == '"':
			quoted, start = true, false
		case c == ' ' || c == '\t':
		default:
			start = false
		}
	}
	if quoted {
		return strings.Count(v, ",") + 1
	}
	return n
}

// checkJSONContentType accepts application/json, with a UTF-8 charset if any,
// under either label clients send for it ("utf-8", and "utf8", which the WHATWG
// Encoding Standard lists as a label of UTF-8 and some HTTP libraries write).
func checkJSONContentType(ct string) error {
	if ct == "" {
		return errors.New("Content-Type must be application/json; the request has none")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("Content-Type must be application/json, not %q", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return fmt.Errorf("Content-Type must be application/json in UTF-8, not charset %q", cs)
	}
	return nil
}

// DecodeTask parses a task body strictly, for every ingress that reads JSON (HTTP,
// the tasks topic's plain tasks; Ingress.Decode calls it): a single JSON object whose keys are Task's field names, spelled exactly
// (encoding/json alone would take "INPUT" for "input") and each given once; values of
// the right types; nothing after the object; no deadline_ms of 0 or null (leave it
// out for no deadline), no task_id but a non-empty string. Every error wraps ErrBadTask and says what was wrong; the task
// is then validated (Task.Validate).
func DecodeTask(body []byte) (Task, error) {
	t, err := decodeTask(body, messages.ValidJSON(body))
	if err != nil {
		return Task{}, err
	}
	return t, t.Validate()
}

// decodeTask is DecodeTask without Task.Validate, for callers that validate the
// task themselves (Ingress.admit); valid says whether body is valid JSON
// (json.Valid), which the caller found out already.
func decodeTask(body []byte, valid bool) (Task, error) {
	if !valid {
		err := json.Unmarshal(body, new(json.RawMessage)) // says what is wrong
		return Task{}, fmt.Errorf("%w: malformed JSON: %v", ErrBadTask, err)
	}
	deadline, taskID, err := taskKeys(body)
	if err != nil {
		return Task{}, err
	}
	if taskID != nil && taskID[0] != '"' {
		return Task{}, fmt.Errorf("%w: task_id must be a string (%s), or left out; got %s", ErrBadTask, TaskIDRule, QuoteHead(string(taskID)))
	}
	var t Task
	if err := json.Unmarshal(body, &t); err != nil {
		return Task{}, taskTypeError(err)
	}
	if deadline != nil && t.DeadlineMS == 0 {
		return Task{}, badDeadline(string(deadline))
	}
	if taskID != nil && t.TaskID == "" {
		return Task{}, fmt.Errorf("%w: task_id is empty: it must be %s, or left out", ErrBadTask, TaskIDRule)
	}
	return t, nil
}

// taskTypeError is the error of a task body (valid JSON) that json.Unmarshal
// refused: a field's value of another JSON type than the field's, or a number
// the field cannot hold, says which field and what it takes (the body is no
// malformed JSON, and Go's type names mean nothing to a client); a huge number
// is clipped (quoteHead).
func taskTypeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return fmt.Errorf("%w: malformed JSON: %v", ErrBadTask, err)
	}
	want := "a string"
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	}
	if num, ok := strings.CutPrefix(te.Value, "number "); ok {
		return fmt.Errorf("%w: %s must be %s within its bounds, got %s", ErrBadTask, te.Field, want, QuoteHead(num))
	}
	return fmt.Errorf("%w: %s must be %s, not a JSON %s", ErrBadTask, te.Field, want, te.Value)
}

// taskKeys checks the top-level keys of a task body (valid JSON: json.Valid) and
// returns the raw values of its deadline_ms and task_id, nil without them.
func taskKeys(body []byte) (deadline, taskID []byte, err error) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return nil, nil, fmt.Errorf("%w: the body must be a JSON object", ErrBadTask)
	}
	names := taskFields()
	// The keys seen, as decoded: a plain key is its bytes in body. A key is looked
	// up and compared as a string that is not copied to the heap (a short one);
	// only an error keeps a copy.
	var seen [16][]byte // Task has fewer fields
	n := 0
	scanMembers(body, func(raw, value []byte) {
		if err != nil {
			return
		}
		decoded, key := raw, string(raw)
		if !plainASCII(raw) {
			var unquoted string
			if uerr := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &unquoted); uerr != nil {
				err = fmt.Errorf("%w: malformed JSON: %v", ErrBadTask, uerr)
				return
			}
			decoded, key = []byte(unquoted), unquoted
		}
		switch {
		case !names[key]:
			key := strings.Clone(key)
			err = fmt.Errorf("%w: unknown field %s", ErrBadTask, QuoteHead(key))
			for name := range names {
				if strings.EqualFold(name, key) {
					err = fmt.Errorf("%w: unknown field %s (field names are case-sensitive: %q)", ErrBadTask, QuoteHead(key), name)
				}
			}
		case slices.ContainsFunc(seen[:n], func(k []byte) bool { return string(k) == key }):
			err = fmt.Errorf("%w: duplicate key %s", ErrBadTask, QuoteHead(strings.Clone(key)))
		default:
			seen[n] = decoded
			n++
			switch key {
			case "deadline_ms":
				deadline = value
			case "task_id":
				taskID = value
			}
		}
	})
	return deadline, taskID, err
}

// plainASCII reports whether the text between a JSON string's quotes holds only
// ASCII and no escapes: it is the string's value.
func plainASCII(s []byte) bool {
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// taskFields are the JSON names of Task's fields.
var taskFields = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	tt := reflect.TypeFor[Task]()
	for i := range tt.NumField() {
		name, _, _ := strings.Cut(tt.Field(i).Tag.Get("json"), ",")
		if name != "-" { // Task.ID: Go callers' only
			names[name] = true
		}
	}
	return names
})

// SessionStatus is the body of GET /v1/sessions/{id}.
type SessionStatus = messages.TaskResult

// Status folds a session's events into its status (from the fold the last read
// kept, statusFolds); ok is false for an unknown session.
func (n *Node) Status(ctx context.Context, id string) (SessionStatus, bool, error) {
	var status SessionStatus
	known, err := n.folds.with(ctx, n.log, id, func(st *actors.SessionState) error {
		status = statusOf(id, st)
		return nil
	})
	switch {
	case errors.Is(err, ErrUnknownSession):
		return SessionStatus{}, false, nil
	case err != nil:
		return SessionStatus{}, known, err
	}
	return status, true, nil
}

// statusOf is the status of the session id folded in st.
func statusOf(id string, st *actors.SessionState) SessionStatus {
	status, out, errMsg := st.Status()
	return SessionStatus{SessionID: id, TaskID: st.StatusTask(), Status: status, Output: out, Error: errMsg, Reason: st.StatusReason(), Note: st.Note()}
}

// sessionView is the body of GET /v1/sessions/{id}: the session's status and, while
// its task waits for them, the calls waiting for approval.
type sessionView struct {
	SessionStatus
	Approvals []PendingApproval `json:"approvals,omitempty"`
}

func (n *Node) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !eventlog.IsSession(id) {
		notASession(w, id)
		return
	}
	var view sessionView
	_, err := n.folds.with(r.Context(), n.log, id, func(st *actors.SessionState) error {
		view = sessionView{SessionStatus: statusOf(id, st), Approvals: pendingApprovals(id, st)}
		return nil
	})
	switch {
	case errors.Is(err, ErrUnknownSession):
		writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
	case err != nil:
		writeError(w, http.StatusInternalServerError, "session %s: %v", id, err)
	default:
		writeJSON(w, http.StatusOK, view)
	}
}

func (n *Node) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := eventlog.Filter{Limit: 100, Status: q.Get("status")}
	if v := q.Get("sessions_only"); v != "" {
		only, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "sessions_only must be true or false")
			return
		}
		f.SessionsOnly = only
	}
	// An agent names an agent's sessions (that of each one's first task), as the
	// node's configuration names its agents: another value names none.
	if f.Agent = q.Get("agent"); f.Agent != "" && f.Agent != eventlog.DefaultAgent && !agentNamePattern.MatchString(f.Agent) {
		writeError(w, http.StatusBadRequest, "agent must be %s, or default; got %s", AgentNameRule, QuoteHead(f.Agent))
		return
	}
	// A status or an agent is a session's: the other streams (listed with their
	// kind as their status, markNotes) have none to match.
	f.SessionsOnly = f.SessionsOnly || f.Status != "" || f.Agent != ""
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > 10000 {
			writeError(w, http.StatusBadRequest, "limit must be an integer between 1 and 10000")
			return
		}
		f.Limit = l
	}
	switch f.Status {
	case "", messages.StatusRunning, messages.StatusCompleted, messages.StatusFailed:
	default:
		writeError(w, http.StatusBadRequest, "status must be %s, %s or %s", messages.StatusRunning, messages.StatusCompleted, messages.StatusFailed)
		return
	}
	since, err := eventlog.ParseSince(q.Get("since"), time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	f.SinceUS = since
	if f.UpdatedSinceUS, err = eventlog.ParseSince(q.Get("updated_since"), time.Now()); err != nil {
		writeError(w, http.StatusBadRequest, "updated_since: %v", err)
		return
	}
	var detail bool
	if v := q.Get("detail"); v != "" {
		if detail, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, "detail must be true or false")
			return
		}
	}
	infos, err := n.log.Sessions(r.Context(), f)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if r.Method == http.MethodHead {
		// A HEAD (a monitor's check) gets the answer's headers once the log
		// answered the list, as HEAD of a session's events does: net/http
		// discards a HEAD answer's body, and with detail=true each listed
		// session's events would be read and folded only to be dropped.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	if infos == nil {
		infos = []eventlog.SessionInfo{}
	}
	MarkStreams(infos)
	if detail {
		rows, err := n.sessionRows(r.Context(), infos)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		writeJSON(w, http.StatusOK, rows)
		return
	}
	writeJSON(w, http.StatusOK, infos)
}

// notASession answers 404 to a session's status or cancel asked of a stream of the
// log that is no session (notes, a memory namespace, a dashboard sign-in, …: the
// session list names their kind): it has no status and runs no task. Its events
// are read as a session's are.
func notASession(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "no session %s: it is a stream of the log that is no session (GET /v1/sessions/{id}/events reads its events)", QuoteHead(id))
}

// maxEventsPage bounds GET /v1/sessions/{id}/events?limit=.
const maxEventsPage = 10000

// getEvents answers a session's events in seq order: all of them, or, with
// ?from=<seq> and ?limit=<n>, the page of at most n events from seq from on (a
// page shorter than n is the last; a from past the session's last seq answers []).
// The array is encoded to the client event by event, never whole in memory.
func (n *Node) getEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	from, limit := uint64(1), 0 // 0: no limit
	if v := q.Get("from"); v != "" {
		// Seqs are stored as signed 64-bit integers.
		f, err := strconv.ParseUint(v, 10, 63)
		if err != nil || f < 1 {
			writeError(w, http.StatusBadRequest, "from must be a seq number of at least 1")
			return
		}
		from = f
	}
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > maxEventsPage {
			writeError(w, http.StatusBadRequest, "limit must be an integer between 1 and %d", maxEventsPage)
			return
		}
		limit = l
	}
	// The events from from on, read a page at a time (eventPages): a client
	// that reads slowly, or not at all, holds a page in memory, not the session.
	pages := n.eventPages(id, from, limit)
	events, err := pages.next(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "session %s: %v", id, err)
		return
	}
	if len(events) == 0 {
		known := false
		if from > 1 { // past the end of a session, or no session at all
			if known, err = n.streamKnown(r.Context(), id); err != nil {
				writeError(w, http.StatusInternalServerError, "session %s: %v", id, err)
				return
			}
		}
		if !known {
			writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
			return
		}
	}
	if r.Method == http.MethodHead {
		// A HEAD (a monitor's check) gets the answer's headers: net/http discards
		// a HEAD answer's body, which would be read from the log and encoded
		// whole only to be dropped (as long as the GET of a large session).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	a := newEventsArray(paceAnswer(w, n.cfg.HTTP))
	for len(events) > 0 {
		if err := a.write(events); err != nil {
			if errors.Is(err, errClientLeft) {
				return
			}
			n.cfg.Logger.Warn("a session's events could not be answered to their end", "session", id, "err", err)
			cutAnswer()
		}
		if events, err = pages.next(r.Context()); err != nil {
			n.cfg.Logger.Warn("a session's events could not be read to their end", "session", id, "err", err)
			cutAnswer()
		}
	}
	a.close()
}

// cutAnswer ends a streamed answer that cannot be finished (its status and part
// of its body are sent) so that its client sees it fail: net/http closes the
// connection without the chunked body's last chunk, which the client reads as an
// unexpected EOF. An answer that just returned ended its body as a whole one
// does: a JSON array of a session's events cut at a page that could not be
// read was, to its client, all of the session's events.
func cutAnswer() {
	panic(http.ErrAbortHandler)
}

// eventsPageMax and eventsPageBytes size the pages in which an answer that
// streams a session's events (GET /v1/sessions/{id}/events, its stream) reads
// them from the log (eventPages): at most eventsPageMax events, stopped by the
// log after the event that brings the page's payload to eventsPageBytes. Events
// are mostly small, but a task's input alone may be 1 MiB. A page's size was
// guessed from the events before it (as many as hold eventsPageBytes at their
// size): after 8 small events came a page of 1000, which read 40 events of 256
// KiB that followed them, 10 MiB, at once.
const (
	eventsPageMax   = 1000
	eventsPageBytes = 1 << 20
)

// eventPages reads a session's events from seq from on, at most limit of them
// (0: all), a page at a time (next), from a log that reads pages
// (eventlog.PageReader: SQLite's and ClickHouse's). Another log is read whole
// at once: its page reads would read the rest of the session each time.
//
// Before, an answer read the session whole: each client of a session of 20 MB
// that did not read its answer held 20 MB of the node's memory until its write
// timeout, and a hundred of them took 3 GB.
func (n *Node) eventPages(id string, from uint64, limit int) *eventPages {
	return &eventPages{log: n.log, id: id, from: from, limit: limit}
}

type eventPages struct {
	log   eventlog.Log
	id    string
	from  uint64 // the next page's first seq
	limit int    // events wanted in all; 0: all of them
	read  int    // events read so far
	done  bool
}

// next reads the next page; an empty one ends the events.
func (p *eventPages) next(ctx context.Context) ([]messages.Envelope, error) {
	if p.done {
		return nil, nil
	}
	pr, paged := p.log.(eventlog.PageReader)
	if !paged {
		p.done = true
		return eventlog.ReadPage(ctx, p.log, p.id, p.from, p.limit)
	}
	size := eventsPageMax
	if p.limit > 0 {
		size = min(size, p.limit-p.read)
	}
	events, err := pr.ReadN(ctx, p.id, p.from, size, eventsPageBytes)
	if err != nil {
		return nil, err
	}
	p.read += len(events)
	// A page short in events and in bytes is the last (ReadN counts only the
	// events it returns, and stops short of size only at eventsPageBytes).
	if len(events) < size && messages.PayloadBytes(events) < eventsPageBytes || p.limit > 0 && p.read >= p.limit {
		p.done = true
	}
	if len(events) > 0 {
		p.from = events[len(events)-1].Seq + 1
	}
	return events, nil
}

// streamKnown reports whether the log holds a stream (a session or another) of
// this ID: its first event, from a log that reads pages (SQLite's and
// ClickHouse's), else the streams whose ID starts with it. The listing costs as
// many rows as streams match: GET /v1/sessions/0/events?from=2 listed every session whose ID starts
// with 0 (most of them), 0.1 s at each call on a log of 11,000 sessions.
func (n *Node) streamKnown(ctx context.Context, id string) (bool, error) {
	if pr, ok := n.log.(eventlog.PageReader); ok {
		first, err := pr.ReadN(ctx, id, 1, 1, 0)
		return len(first) > 0, err
	}
	infos, err := n.log.Sessions(ctx, eventlog.Filter{Prefix: id})
	if err != nil {
		return false, err
	}
	for _, info := range infos {
		if info.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// eventsArray answers 200 with events as one JSON array, written as it is
// encoded, one event at a time, as their pages come (write): a session's events
// can be tens of megabytes, which json.Encoder would first build whole in
// memory. The bytes are those writeJSON writes (a compact array, then a
// newline) once close ends it.
type eventsArray struct {
	bw  *bufio.Writer
	one bytes.Buffer // an event's encoding, reused
	enc *json.Encoder
	sep byte
}

func newEventsArray(w http.ResponseWriter) *eventsArray {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	a := &eventsArray{bw: bufio.NewWriterSize(w, 32<<10), sep: '['}
	a.enc = json.NewEncoder(&a.one)
	return a
}

// errClientLeft is eventsArray.write's error when the client is gone.
var errClientLeft = errors.New("the client left")

// write adds events to the array: errClientLeft when the client left, or the
// error of an event that cannot be encoded.
func (a *eventsArray) write(events []messages.Envelope) error {
	for i := range events {
		a.one.Reset()
		if err := a.enc.Encode(&events[i]); err != nil {
			return fmt.Errorf("seq %d cannot be encoded: %w", events[i].Seq, err)
		}
		_ = a.bw.WriteByte(a.sep)
		a.sep = ','
		if _, err := a.bw.Write(bytes.TrimSuffix(a.one.Bytes(), []byte("\n"))); err != nil {
			return errClientLeft
		}
	}
	return nil
}

// close ends the array.
func (a *eventsArray) close() {
	if a.sep == '[' {
		_ = a.bw.WriteByte('[')
	}
	_, _ = a.bw.WriteString("]\n")
	_ = a.bw.Flush()
}

// paceAnswer lets a large answer written to w take longer than WriteTimeout while
// the client reads it at MinBodyRate on average, as paceBodies lets a request's body
// arrive: each write moves the write deadline on by the time its bytes take at that
// rate. A session's events, which the dashboard's timeline reads whole, can be
// megabytes (tool results): a client on a slow link had them cut after
// WriteTimeout (30 s) and read no valid JSON at all. A client that reads slower
// than that rate is cut as before.
func paceAnswer(w http.ResponseWriter, cfg HTTPConfig) http.ResponseWriter {
	return &pacedAnswer{ResponseWriter: w, rc: http.NewResponseController(w),
		deadline: time.Now().Add(cfg.WriteTimeout), rate: cfg.MinBodyRate}
}

// pacedAnswer is paceAnswer's writer.
type pacedAnswer struct {
	http.ResponseWriter
	rc       *http.ResponseController
	deadline time.Time
	rate     int64 // bytes a second
}

func (a *pacedAnswer) Write(p []byte) (int, error) {
	if a.rate > 0 {
		a.deadline = a.deadline.Add(time.Duration(float64(len(p)) / float64(a.rate) * float64(time.Second)))
		_ = a.rc.SetWriteDeadline(a.deadline)
	}
	return a.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *pacedAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (n *Node) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !eventlog.IsSession(id) {
		notASession(w, id)
		return
	}
	// A Content-Length over the bound is refused before anything is looked up or
	// read, as an approval's is: a client that sends it slowly learns at once.
	if r.ContentLength > cancelMaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d: a cancellation is {\"task_id\", \"reason\"}", r.ContentLength, cancelMaxBody)
		return
	}
	st, known, err := n.Status(r.Context(), id)
	switch {
	case err != nil:
		// Not "no session": a client told so stops trying, and the task runs on.
		writeError(w, http.StatusServiceUnavailable, "session %s: %v; the cancellation was not recorded: send it again", id, err)
		return
	case !known && !n.sharded():
		writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
		return
	}
	b, ok := readCancelBody(w, r)
	if !ok {
		return
	}
	if !known && b.TaskID == "" {
		// A sharded node's cancellation naming a task goes on: the task may be
		// on its way to its owner, not recorded yet (cancelNamed).
		writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
		return
	}
	// The task running as the request came: one handled after it ended (sent
	// twice, or many at once) does not cancel the task queued behind it.
	var running string
	if st.Status == messages.StatusRunning {
		running = st.TaskID
	}
	reason := cmp.Or(b.Reason, "cancelled through the HTTP API")
	if b.TaskID != "" {
		// The task the body names, running or waiting its turn: never another.
		err = n.cancelNamed(r.Context(), id, b.TaskID, reason)
	} else {
		err = n.cancelTask(r.Context(), id, running, reason)
	}
	answerLate(w) // as postTask's
	switch {
	case errors.Is(err, actors.ErrTaskCancelled) && b.TaskID != "":
		// The task the body names ended cancelled: this cancellation sent again
		// (its 202 lost) is answered as it was. Without a task_id, a request
		// handled after the task ended is not known to be the one that ended it.
		writeJSON(w, http.StatusAccepted, map[string]string{"session_id": id, "status": "cancelling"})
	case errors.Is(err, actors.ErrNoRunningTask) && b.TaskID != "":
		writeError(w, http.StatusConflict, "session %s has no task %s running or waiting its turn (it ended, or is unknown)", id, QuoteHead(b.TaskID))
	case errors.Is(err, actors.ErrNoRunningTask):
		writeError(w, http.StatusConflict, "session %s has no running task", id)
	case errors.Is(err, ErrBadTask):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, actors.ErrSessionFailed):
		writeError(w, http.StatusInternalServerError, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		writeJSON(w, http.StatusAccepted, map[string]string{"session_id": id, "status": "cancelling"})
	}
}

// cancelBody is the optional body of POST /v1/sessions/{id}/cancel: the task to
// cancel (its task_id, as the task's 202 and GET /v1/sessions/{id} name it, or
// its task.submitted event's ID), running or waiting its turn behind the running
// one, and the reason recorded as its error. Without a body, or with an empty
// task_id, the request cancels the task running as it came.
type cancelBody struct {
	TaskID string `json:"task_id,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// cancelMaxBody bounds a cancellation's body, as an approval's.
const cancelMaxBody = approvalMaxBody

// readCancelBody reads a cancellation's optional body. A body that is there must
// be a JSON cancelBody, read as strictly as an approval's: one that named a task
// and were ignored would cancel the running task instead. It answers the
// request itself (4xx) and returns false when the body is refused.
func readCancelBody(w http.ResponseWriter, r *http.Request) (cancelBody, bool) {
	var b cancelBody
	body, ok := readSmallBody(w, r, cancelMaxBody, `a cancellation is {"task_id", "reason"}`)
	if !ok {
		return b, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return b, true
	}
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return b, false
	}
	if !decodeSmallBody(w, body, &b, []string{"task_id", "reason"}, `want {"task_id": "…", "reason": "…"}, each optional, or no body`) {
		return b, false
	}
	if len(b.TaskID) > maxCancelTaskID {
		writeError(w, http.StatusBadRequest, "task_id: %d bytes, want at most %d", len(b.TaskID), maxCancelTaskID)
		return b, false
	}
	return b, true
}

// stream sends a session's events as Server-Sent Events: first those in the log after
// Last-Event-ID (the seq), then live ones, in seq order without duplicates. A watcher
// that falls behind the live feed catches up from the log.
//
// Between them come model.delta events (unless ?deltas=false): the increments of the
// session's model answers as they stream (Node.WatchDeltas). They have no id, so a
// reconnecting client's Last-Event-ID is always a seq, and they are best effort: a
// client that reads slowly misses some, never an event, and the call's
// model.responded carries the whole answer.
func (n *Node) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	var last uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		// Seqs are stored as signed 64-bit integers.
		seq, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			writeError(w, http.StatusBadRequest, "Last-Event-ID must be a seq number")
			return
		}
		last = seq
	}
	watch := n.WatchDeltas // model.delta events unless ?deltas=false
	if v := r.URL.Query().Get("deltas"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "deltas must be true or false")
			return
		}
		if !on {
			watch = n.Watch
		}
	}
	live, stop := watch(id)
	defer func() { stop() }()
	// The events after last, a page at a time (eventPages): a client that reads
	// slowly holds a page of them in memory, not the session.
	pages := n.eventPages(id, last+1, 0)
	backlog, err := pages.next(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "session %s: %v", id, err)
		return
	}
	if len(backlog) == 0 {
		known, err := n.sessionKnown(r.Context(), id, last)
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, "session %s: %v", id, err)
			return
		case !known:
			writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
			return
		}
	}
	w, stopKeepAlive := n.startSSE(w)
	defer stopKeepAlive()
	fl = w.(http.Flusher)
	if r.Method == http.MethodHead {
		// A HEAD (a monitor's check) gets the stream's headers and ends: net/http
		// discards a HEAD answer's body, so a stream that went on would never end
		// while its client kept the connection, and the client's next request on
		// it would never be answered.
		return
	}
	// answered are the calls whose model.responded the stream sent: a delta of
	// one comes after it when the call was answered between the watch and a read
	// of the log (the watch caught up on the call's text as it began), and is not
	// sent, as WatchResuming does not hand one on.
	var answered answeredCalls
	send := func(e messages.Envelope) bool {
		if e.Seq <= last {
			return true
		}
		b, err := messages.Marshal(e)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b); err != nil {
			return false
		}
		last = e.Seq
		if e.Type == messages.TypeModelResponded {
			answered.add(e.CausationID)
		}
		return true
	}
	sendDelta := func(e messages.Envelope) bool {
		b, err := messages.Marshal(e)
		if err != nil {
			return false
		}
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, b)
		return err == nil
	}
	// sendPages sends the pages of events that pages reads. A page that cannot
	// be read cuts the stream (cutAnswer): its client sees it fail, and
	// reconnects from the last event it read (Last-Event-ID), where a stream
	// ended as a whole one ends was a silent end to the events.
	sendPages := func(pages *eventPages) bool {
		for {
			events, err := pages.next(r.Context())
			if err != nil {
				if r.Context().Err() != nil {
					return false // the client left
				}
				n.cfg.Logger.Warn("a session's stream could not read its events from the log", "session", id, "after_seq", last, "err", err)
				cutAnswer()
			}
			if len(events) == 0 {
				return true
			}
			for _, e := range events {
				if !send(e) {
					return false
				}
			}
			fl.Flush()
		}
	}
	// sendLog sends the events the log has after the last one sent.
	sendLog := func() bool { return sendPages(n.eventPages(id, last+1, 0)) }
	for _, e := range backlog {
		if !send(e) {
			return
		}
	}
	if !sendPages(pages) {
		return
	}
	fl.Flush()
	pending := map[uint64]messages.Envelope{}
	// drain sends the pending events that follow the last one sent, in order, and
	// forgets those sent already.
	drain := func() bool {
		for {
			next, ok := pending[last+1]
			if !ok {
				break
			}
			delete(pending, last+1)
			if !send(next) {
				return false
			}
		}
		for seq := range pending {
			if seq <= last {
				delete(pending, seq)
			}
		}
		return true
	}
	// Events that wait behind a missing one for gapPause are sent from the log: a
	// live copy can be missing for good (the hub drops a bus copy it cannot read,
	// an event too large for the bus whose reading from the log failed), and
	// nothing else would fill the gap while the watch lasts. The pause doubles,
	// up to rewatchMax, while the log does not have it either (a log that lags).
	var (
		gap      <-chan time.Time // nil while no event waits behind a missing one
		gapPause time.Duration
	)
	watchGap := func() {
		switch {
		case len(pending) == 0:
			gap, gapPause = nil, 0
		case gap == nil:
			gapPause = min(max(2*gapPause, rewatchMin), rewatchMax)
			gap = time.After(gapPause)
		}
	}
	// A watch that ends at once, before it delivered anything (the cluster's bus
	// feed cannot subscribe, or its subscription keeps ending), is taken again only
	// after a pause, doubling up to rewatchMax: at once, each stream would read the
	// log in a loop for as long as the bus is down. One that delivered something or
	// lasted (a session that moved between nodes) is taken again at once.
	var (
		got       bool             // the current watch delivered something
		watchedAt = time.Now()     // when the current watch began
		pause     time.Duration    // before the next watch, when this one ended at once
		rewatch   <-chan time.Time // the paused watch's turn; nil when none waits
	)
	catchUp := func() bool {
		live, stop = watch(id)
		got, watchedAt = false, time.Now()
		if !sendLog() {
			return false
		}
		if !drain() {
			return false
		}
		fl.Flush()
		watchGap()
		return true
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.streamsDone:
			return
		case <-gap:
			gap = nil
			if !sendLog() {
				return
			}
			if !drain() {
				return
			}
			fl.Flush()
			watchGap()
		case <-rewatch:
			rewatch = nil
			if !catchUp() {
				return
			}
		case e, open := <-live:
			if !open {
				// Fell behind (or the node is closing): catch up from the log.
				if n.hub.isClosed() {
					return
				}
				if got || time.Since(watchedAt) >= rewatchMax {
					pause = 0
				} else {
					pause = min(max(2*pause, rewatchMin), rewatchMax)
					live = nil // until the pause is over
					rewatch = time.After(pause)
					continue
				}
				if !catchUp() {
					return
				}
				continue
			}
			got = true
			if e.Type == messages.TypeModelDelta {
				// Not an event: no id (Last-Event-ID stays a seq), and dropped
				// while events wait to be sent in order (best effort, as ever),
				// or once its call's answer was sent.
				if len(pending) == 0 && !answered.has(deltaKey(e)) && !sendDelta(e) {
					return
				}
				fl.Flush()
				continue
			}
			// Live events can overtake the backlog read; keep them in seq order.
			pending[e.Seq] = e
			if !drain() {
				return
			}
			fl.Flush()
			watchGap()
		}
	}
}

// rewatchMin and rewatchMax bound the pause of a stream before it watches its
// session again after a watch that delivered nothing (stream).
const (
	rewatchMin = 50 * time.Millisecond
	rewatchMax = 5 * time.Second
)

// sessionKnown reports whether the log has a session, for a stream whose client has
// read up to seq last (0: nothing) and found nothing after it.
func (n *Node) sessionKnown(ctx context.Context, id string, last uint64) (bool, error) {
	// One event is read, not the session from there on: a client ahead of the
	// log (a Last-Event-ID past its end) had the whole session read.
	if last > 0 {
		// The usual case: the client has read to the end.
		events, err := eventlog.ReadPage(ctx, n.log, id, last, 1)
		if err != nil || len(events) > 0 {
			return len(events) > 0, err
		}
	}
	// The client is ahead of the log, or the session does not exist.
	events, err := eventlog.ReadPage(ctx, n.log, id, 1, 1)
	return len(events) > 0, err
}

// startSSE starts a Server-Sent Events answer, to be written and flushed through
// the writer it returns: the stream outlives the server's read and write timeouts
// (the request has no body left to read, and each write through it gets a deadline
// of its own, deadlined), and a stream silent for half the write timeout (15 s
// at most) gets a keep-alive comment (internal/ssekeepalive, as A2A's and MCP's
// streams) that extends the deadline before it passes (HTTP/2 resets a stream
// whose deadline passed even between writes). stop ends the keep-alive: the
// handler calls it before it returns.
func (n *Node) startSSE(w http.ResponseWriter) (sse http.ResponseWriter, stop func()) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	writeTimeout := n.cfg.HTTP.WriteTimeout
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(writeTimeout)) }
	extend()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse, stop = ssekeepalive.Wrap(deadlined{w, extend}, max(min(15*time.Second, writeTimeout/2), time.Millisecond))
	sse.WriteHeader(http.StatusOK)
	return sse, stop
}

// deadlined is a stream's writer whose every write (a keep-alive comment too)
// extends its write deadline first.
type deadlined struct {
	http.ResponseWriter
	extend func()
}

func (d deadlined) Write(p []byte) (int, error) {
	d.extend()
	return d.ResponseWriter.Write(p)
}

func (d deadlined) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (d deadlined) Unwrap() http.ResponseWriter { return d.ResponseWriter }
