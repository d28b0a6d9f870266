package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/push"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
)

// ProtocolVersion is the A2A protocol version served.
const ProtocolVersion = "0.3.0"

// DefaultMaxBody bounds a JSON-RPC request body.
const DefaultMaxBody = 2 << 20

// CardPath is where an agent card is served, under the node's root or an agent's
// endpoint.
const CardPath = "/.well-known/agent-card.json"

// LegacyCardPath is where A2A 0.2 put an agent card (0.3 moved it to CardPath):
// the card is served there too, as the A2A Python SDK's servers serve it, for
// the clients and registries that still look for it there.
const LegacyCardPath = "/.well-known/agent.json"

// ServerConfig configures the A2A server of a node.
type ServerConfig struct {
	// PublicURL is the base URL clients reach the node at ("https://host"); empty,
	// the cards are built from each request's Host (and X-Forwarded-Proto).
	PublicURL string
	// PushAllow lists the private hosts and prefixes push-notification webhooks may
	// target (as tools.http_fetch.allow); by default only public addresses.
	PushAllow []string
	// PushLog, when set, is the log the push-notification configs are kept in
	// (PushStore: they outlive the process); nil: in memory only.
	PushLog eventlog.Log
	// PushKey, with PushLog, returns the node's secret key (SecretKeySize bytes),
	// with which the configs' token and credentials are sealed in the log
	// (PushSealer), so that every node with the same key posts with them, after a
	// restart too; it is called when a config with secrets is first set or read.
	// nil: they are kept in this process's memory only.
	PushKey func() ([]byte, error)
	// PushAlone, with PushLog, says that no other node posts the notifications of
	// the log's tasks: the node opened the log itself, locked for it alone (an
	// embedded node's SQLite log). A task's notifications then take no lease (see
	// The lease of a task's notifications): a post costs no write nor read of the
	// log, and a lease left by the node's run before a crash holds back none of
	// its posts (that run is gone: the lock was its).
	PushAlone bool
	// MaxBody bounds a request body (0: DefaultMaxBody).
	MaxBody int64
	// KeepAlive is how long a stream (message/stream, tasks/resubscribe) stays
	// silent before an SSE comment keeps it alive (0: DefaultKeepAlive).
	KeepAlive time.Duration
	// WriteTimeout bounds each write of an answer, an event of a stream among
	// them: a client that reads nothing for that long is dropped, its stream ended
	// (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
	// Name and Version name the node in its card.
	Name, Version string
	// Bearer says that a request needs a bearer token (the node's API tokens): the
	// cards declare the scheme, so that a client knows to send one.
	Bearer bool
	// Stopping, closed when the node stops serving (nil: never), ends the answers
	// that wait on a task (streamMethods, sendMethods): a stream ends, its last
	// event an error saying so (none when its task's final event came first), and
	// a blocking message/send answers the task as it stands; the client
	// resubscribes or reads the task where it goes on. Open, they would hold the HTTP server's
	// shutdown until its timeout, and be cut then.
	Stopping <-chan struct{}
	Logger   *slog.Logger
}

// AgentInfo describes an agent for its card: its name ("default" for the node's
// default agent), what it does and the tools it may call.
type AgentInfo struct {
	Name        string
	Description string
	Tools       []string
}

// Route is a handler of the A2A server at a http.ServeMux pattern.
type Route struct {
	Pattern string
	Handler http.Handler
}

// Server serves a node's agents over A2A's JSON-RPC binding.
type Server struct {
	cfg    ServerConfig
	agents []AgentInfo
	rpc    map[string]http.Handler
	pushes *PushStore // nil: the configs are in memory only
	// backend and sender serve ResumePushes.
	backend Backend
	sender  storeSender
	// push posts the notifications of every agent's tasks (Close closes it).
	push *PushSender
}

// Close stops the server's push notifications: none is posted after it returns
// (PushSender.Close), where the next node to follow a task would post its own.
// Call it once the node's tasks stopped, before its log closes (a task's end
// posted meanwhile is recorded as posted, and the leases of the tasks'
// notifications this node holds are given up: PushStore.Release). It is
// idempotent.
func (s *Server) Close() error {
	err := s.push.Close()
	if s.pushes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), pushFinalTimeout)
		defer cancel()
		if rerr := s.pushes.Release(ctx); rerr != nil {
			s.cfg.Logger.Warn("a2a push: the leases of the tasks' notifications cannot be given up: the nodes that follow those tasks post once they expire", "err", rerr)
		}
	}
	return err
}

// PrunePushes deletes from the log, every hour (the first time after a random
// part of it, so that the nodes over one log seldom do at once), the push configs
// of the tasks that ended PushRetention ago (PushStore.Prune), until ctx ends.
// Before, it posts the ends not posted (FinishPushes): a running node does what
// a node that starts does (ResumePushes), so that an end a closing node cut is
// posted while no node starts. It does nothing without ServerConfig.PushLog.
func (s *Server) PrunePushes(ctx context.Context) {
	if s.pushes == nil {
		return
	}
	const every = time.Hour
	t := time.NewTimer(time.Duration(rand.Int64N(int64(every))) + 1)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.FinishPushes(ctx)
		n, err := s.pushes.Prune(ctx, time.Now().Add(-PushRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.Warn("a2a push: pruning the configs of ended tasks failed; trying again later", "pruned", n, "err", err)
		case n > 0:
			s.cfg.Logger.Info("a2a push: pruned the configs of ended tasks", "tasks", n, "older_than", PushRetention)
		}
		t.Reset(every)
	}
}

// NewServer builds the server of agents on backend; agents[0] is the default
// agent, served at /a2a (the others at /a2a/{name}).
func NewServer(b Backend, cfg ServerConfig, agents []AgentInfo) (*Server, error) {
	if len(agents) == 0 {
		return nil, errors.New("a2a: no agents to serve")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Name == "" {
		cfg.Name = "troupe"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("a2a: public_url %q: want an http or https URL", cfg.PublicURL)
		}
		cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	}
	sender, err := NewPushSender(cfg.PushAllow, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, agents: agents, rpc: map[string]http.Handler{}, backend: b, push: sender}
	var sealer *PushSealer
	if cfg.PushKey != nil {
		sealer = NewPushSealer(cfg.PushKey)
	}
	if cfg.PushLog != nil {
		// One store of every agent's configs (a task ID names its session).
		s.pushes = NewPushStore(cfg.PushLog, sealer, cfg.Logger)
		s.pushes.alone = cfg.PushAlone
		s.pushes.SetEnded(NewTaskStore(b))
		s.sender = storeSender{PushSender: sender, store: s.pushes}
		sender.final = func(ctx context.Context, task sdk.TaskID, configID string, state sdk.TaskState, status int) {
			if err := s.pushes.Final(ctx, task, configID, state, status); err != nil {
				cfg.Logger.Warn("a2a push: the task's end was posted, but that it was is not recorded: a node that starts may post it again", "task", task, "config", configID, "err", err)
			}
		}
	}
	for i, a := range agents {
		name := a.Name
		if i == 0 {
			name = "default"
		}
		store := NewTaskStore(b)
		if len(agents) > 1 {
			// Each endpoint serves its agent's tasks alone; a node of one agent
			// serves every task its log has, as it did.
			store.agent = name
		}
		var pushes a2asrv.PushConfigStore = push.NewInMemoryStore()
		var pushSender a2asrv.PushSender = sender
		if s.pushes != nil {
			pushes, pushSender = s.pushes, storeSender{PushSender: sender, store: s.pushes}
		}
		exec := NewExecutor(b, name)
		h := a2asrv.NewHandler(exec,
			a2asrv.WithTaskStore(store),
			a2asrv.WithPushNotifications(pushes, pushSender),
			a2asrv.WithLogger(cfg.Logger))
		d := NewDedupe(h, exec, store)
		d.checkPush = sender.CheckURL
		d.pushEnd = pushSender.SendPush
		s.rpc[a.Name] = a2asrv.NewJSONRPCHandler(d)
	}
	return s, nil
}

// Routes returns the server's routes: the node's card (at CardPath and
// LegacyCardPath) and its JSON-RPC endpoint (the default agent's) and, when there
// are several agents, each named agent's card (at both) and endpoint.
func (s *Server) Routes() []Route {
	def := s.agents[0]
	node := s.cardHandler(def, "/a2a", true)
	routes := []Route{
		{"GET " + CardPath, node},
		{"GET " + LegacyCardPath, node},
		{"POST /a2a", s.guard(s.rpc[def.Name])},
	}
	if len(s.agents) > 1 {
		for _, a := range s.agents[1:] {
			base := "/a2a/" + a.Name
			card := s.cardHandler(a, base, false)
			routes = append(routes,
				Route{"GET " + base + CardPath, card},
				Route{"GET " + base + LegacyCardPath, card},
				Route{"POST " + base, s.guard(s.rpc[a.Name])})
		}
	}
	return routes
}

// base is the URL the node is reached at.
func (s *Server) base(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
		scheme = p
	}
	return scheme + "://" + r.Host
}

// Card returns the card of agent a served at path, the node's card (every agent
// a skill) when node is set.
func (s *Server) Card(baseURL string, a AgentInfo, path string, node bool) *sdk.AgentCard {
	desc := a.Description
	if desc == "" {
		desc = "A Troupe agent."
	}
	skills := []sdk.AgentSkill{skillOf(a, "default")}
	name := s.cfg.Name
	if node {
		desc = fmt.Sprintf("A Troupe node. Its default agent answers at %s: %s", path, desc)
		if len(s.agents) > 1 {
			desc += " Its other agents are skills, each with an endpoint and a card of its own (/a2a/{name}/.well-known/agent-card.json)."
		}
		for _, o := range s.agents[1:] {
			skills = append(skills, skillOf(o, ""))
		}
	} else {
		name = s.cfg.Name + "/" + a.Name
	}
	card := &sdk.AgentCard{
		Name:               name,
		Description:        desc,
		URL:                baseURL + path,
		PreferredTransport: sdk.TransportProtocolJSONRPC,
		ProtocolVersion:    ProtocolVersion,
		Version:            s.cfg.Version,
		Capabilities:       sdk.AgentCapabilities{Streaming: true, PushNotifications: true},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain"},
		Skills:             skills,
	}
	if s.cfg.Bearer {
		card.SecuritySchemes = sdk.NamedSecuritySchemes{bearerScheme: sdk.HTTPAuthSecurityScheme{Scheme: "Bearer",
			Description: "one of the node's API tokens, in the Authorization header"}}
		card.Security = []sdk.SecurityRequirements{{bearerScheme: sdk.SecuritySchemeScopes{}}}
	}
	return card
}

// bearerScheme names the bearer token scheme in the cards of a node with tokens.
const bearerScheme sdk.SecuritySchemeName = "bearer"

func skillOf(a AgentInfo, fallback string) sdk.AgentSkill {
	name := a.Name
	if name == "" {
		name = fallback
	}
	desc := a.Description
	if desc == "" {
		desc = "Troupe agent " + name
	}
	if len(a.Tools) > 0 {
		desc += " (tools: " + strings.Join(a.Tools, ", ") + ")"
	}
	tags := append([]string{"troupe"}, a.Tools...)
	skill := sdk.AgentSkill{ID: name, Name: name, Description: desc, Tags: tags}
	if name != "default" && fallback == "" {
		skill.Description += "; endpoint /a2a/" + name
	}
	return skill
}

// CardJSON is the JSON of the card of agent a served at path (Card): A2A 0.3's
// card, with A2A 1.0's supportedInterfaces added (the same endpoint, JSON-RPC, 1.0
// first), which a 0.3 client ignores.
func (s *Server) CardJSON(baseURL string, a AgentInfo, path string, node bool) ([]byte, error) {
	card := s.Card(baseURL, a, path, node)
	b, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["supportedInterfaces"] = []map[string]string{
		{"url": card.URL, "protocolBinding": string(sdk.TransportProtocolJSONRPC), "protocolVersion": V1ProtocolVersion},
		{"url": card.URL, "protocolBinding": string(sdk.TransportProtocolJSONRPC), "protocolVersion": strings.TrimSuffix(ProtocolVersion, ".0")},
	}
	return json.Marshal(m)
}

func (s *Server) cardHandler(a AgentInfo, path string, node bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := s.CardJSON(s.base(r), a, path, node)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_, _ = w.Write(b)
	})
}

// rpcError is a JSON-RPC error response.
type rpcError struct {
	JSONRPC string `json:"jsonrpc"`
	ID      any    `json:"id"`
	Error   struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Data    map[string]string `json:"data,omitempty"`
	} `json:"error"`
}

// writeRPCError answers with an error of code; id is the request's (nil: null),
// a json.RawMessage written as it is.
func writeRPCError(w http.ResponseWriter, status int, id any, code int, msg string) {
	e := rpcError{JSONRPC: "2.0", ID: id}
	e.Error.Code, e.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = rpcEncoder(w).Encode(e)
}

// rpcEncoder is a JSON encoder that writes a json.RawMessage (an id as sent) as it
// is: the default one escapes <, > and & in its strings.
func rpcEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// streamMethods are the methods, of 0.3 and of 1.0, whose answer is a stream of
// server-sent events.
var streamMethods = map[string]bool{"message/stream": true, "tasks/resubscribe": true, "SendStreamingMessage": true, "SubscribeToTask": true}

// sendMethods are message/send, of 0.3 and of 1.0: blocking, its answer waits on
// its task's end, as a stream's do (streamMethods); both end when the server
// stops (ServerConfig.Stopping).
var sendMethods = map[string]bool{"message/send": true, "SendMessage": true}

// writeRefusal answers a request of id that the server refuses before the SDK's
// handler sees it, as the SDK answers one it refuses itself: the answer to a
// method that streams (stream) is a stream of one event, the error, since a
// client reads that answer as SSE only (the official Go client found no event in
// a JSON body and ended the stream without an error); and a 0.3 request's error
// (legacy) has the reason in its data too, {"error": msg}, where the official Go
// client reads it (it shows the message alone as its code's name, "invalid
// params"). A 1.0 client reads a list of details in data: it gets none.
func writeRefusal(w http.ResponseWriter, id any, code int, msg string, stream, legacy bool) {
	e := rpcError{JSONRPC: "2.0", ID: id}
	e.Error.Code, e.Error.Message = code, msg
	if legacy {
		e.Error.Data = map[string]string{"error": msg}
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = rpcEncoder(w).Encode(e)
		return
	}
	var buf bytes.Buffer
	if err := rpcEncoder(&buf).Encode(e); err != nil {
		writeRPCError(w, http.StatusOK, id, code, msg)
		return
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n")) // one line: no newline ends the event early
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
}

// stoppedMessage is the error that ends a stream when the server stops.
const stoppedMessage = "the server stops serving: this stream ends, the task goes on; take it up again with tasks/resubscribe (1.0: SubscribeToTask), or read it with tasks/get, on a node that serves it"

// writeStopped ends a stream the server's stop cut (ServerConfig.Stopping) with an
// event that says so, an internal error (-32603) of the request's id, in the
// request's A2A version (legacy: 0.3): a client that reads the stream to its end
// does not take it for the task's.
func writeStopped(w http.ResponseWriter, id any, legacy bool) {
	e := rpcError{JSONRPC: "2.0", ID: id}
	e.Error.Code, e.Error.Message = -32603, stoppedMessage
	if legacy {
		e.Error.Data = map[string]string{"error": stoppedMessage}
	}
	var buf bytes.Buffer
	if err := rpcEncoder(&buf).Encode(e); err != nil {
		return
	}
	_, _ = fmt.Fprintf(w, "data: %s\n\n", bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	_ = http.NewResponseController(w).Flush()
}

// guard bounds the body (413 past MaxBody), answers what is not a JSON-RPC 2.0
// request object with the spec's codes (-32700 parse error, -32600 invalid
// request), translates an A2A 1.0 method to its 0.3 one and back (serveV1), and
// hands the rest to the SDK's handler, which answers an unknown method with -32601.
// Every answer has the request's id as it was sent (requestID, echoID).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBody {
			// Refused before the body is read: the connection closes, or net/http
			// would wait for up to 256 KiB more of the body before it answered.
			w.Header().Set("Connection", "close")
			writeRPCError(w, http.StatusRequestEntityTooLarge, nil, -32600, fmt.Sprintf("request body is larger than %d bytes", s.cfg.MaxBody))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeRPCError(w, http.StatusRequestEntityTooLarge, nil, -32600, fmt.Sprintf("request body is larger than %d bytes", s.cfg.MaxBody))
				return
			}
			if netErr := net.Error(nil); errors.As(err, &netErr) && netErr.Timeout() {
				// The server's read deadline passed; its write deadline, set when
				// the headers were read, passes about then too: the answer gets its own.
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Second))
				writeRPCError(w, http.StatusRequestTimeout, nil, -32600, "the request body was not sent in time")
				return
			}
			writeRPCError(w, http.StatusBadRequest, nil, -32700, "reading the request body: "+err.Error())
			return
		}
		body = messages.TrimByteOrderMark(body)
		if !utf8.Valid(body) {
			// encoding/json would read each bad byte as U+FFFD: a message would
			// run as another text than the one sent.
			writeRPCError(w, http.StatusOK, nil, -32700, fmt.Sprintf("parse error: the body is not valid UTF-8 (byte %d): JSON is sent in UTF-8", messages.InvalidUTF8At(body)))
			return
		}
		// The id is echoed as it was sent (requestID); encoding/json reads the other
		// members by any case, as the SDK does. The same pass tells a body that is
		// not JSON.
		rawID, idOK, err := readRequestID(body)
		if err != nil {
			if d, ok := scanDeepRequest(body, err); ok {
				// Valid JSON, too deep to decode: its id and method are read all
				// the same, and the answer says which member is too deep.
				_, v1 := v1Methods[d.method]
				_, unserved := v1Unserved[d.method]
				code, msg := -32600, fmt.Sprintf("invalid request: %q nests objects and arrays %d levels deep, more than the %d this server reads", d.member, d.depth, maxJSONDepth)
				if d.member == "params" && d.method != "" {
					code, msg = -32602, fmt.Sprintf("invalid params of %s: they nest objects and arrays %d levels deep (the request counted), more than the %d this server reads", d.method, d.depth, maxJSONDepth)
				}
				writeRefusal(w, d.id, code, msg, streamMethods[d.method], !v1 && !unserved)
				return
			}
			writeRPCError(w, http.StatusOK, nil, -32700, "parse error: "+err.Error())
			return
		}
		var id any = rawID // nil: null
		if !idOK {
			id = nil
		}
		var req struct {
			JSONRPC string          `json:"jsonrpc"`
			Method  *string         `json:"method"`
			Params  json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" || req.Method == nil {
			writeRPCError(w, http.StatusOK, id, -32600, `invalid request: want a JSON-RPC 2.0 object with "jsonrpc": "2.0", "method" and "id"`)
			return
		}
		if !idOK {
			// JSON-RPC 2.0: an id is a string, a number or null. Another one is
			// not echoed back, and the request runs nothing (a message starts no task).
			writeRPCError(w, http.StatusOK, nil, -32600, fmt.Sprintf(`invalid request: "id" must be a string, a number or null, not %s`, rawKind(rawID)))
			return
		}
		// A 1.0 method, served or not, is refused as 1.0 answers: a 1.0 client reads
		// a 0.3 "data": {"error": ...} as a list of details.
		_, v1 := v1Methods[*req.Method]
		_, unserved := v1Unserved[*req.Method]
		legacy := !v1 && !unserved
		refuse := func(code int, msg string) { writeRefusal(w, id, code, msg, streamMethods[*req.Method], legacy) }
		if rawID == nil {
			// A JSON-RPC notification: every A2A method is a request, answered
			// under its id (the specification's requests require one). It is
			// refused and runs nothing: run, its answer could not be matched to it,
			// and a message/send sent again would start its task again.
			refuse(-32600, fmt.Sprintf(`invalid request: %s has no "id": A2A methods are requests answered under their id, not JSON-RPC notifications; nothing was run`, *req.Method))
			return
		}
		if v := r.Header.Get(VersionHeader); !versionServed(v) {
			refuse(-32009, fmt.Sprintf("VersionNotSupportedError: A2A-Version %q is not served: this server speaks %s and %s (an empty header is %s)",
				v, strings.TrimSuffix(ProtocolVersion, ".0"), V1ProtocolVersion, strings.TrimSuffix(ProtocolVersion, ".0")))
			return
		}
		// The answer outlives the server's write timeout: a blocking message/send
		// answers when the task ends, a stream as long as the task runs. Each
		// write has a deadline instead, so that a client that stops reading is
		// dropped; the request's context ends the answer when the client goes away.
		w, last := withWriteDeadlines(w, s.cfg.WriteTimeout)
		defer last()
		// A stream silent longer than a client's read timeout (a slow model call or
		// tool) gets SSE comments between its events.
		w, stop := keepAlive(w, s.cfg.KeepAlive)
		defer stop()
		if sendMethods[*req.Method] && s.cfg.Stopping != nil {
			ctx, cancel := withStopping(r.Context(), s.cfg.Stopping)
			defer cancel(nil)
			r = r.WithContext(ctx)
		}
		if !streamMethods[*req.Method] {
			// The SDK's handler writes its JSON answers without a type (net/http
			// would call them text/plain); a stream's writer sets its own.
			w.Header().Set("Content-Type", "application/json")
		}
		if streamMethods[*req.Method] && s.cfg.Stopping != nil {
			// The stream's events end when the server stops (endOnStop), not the
			// SDK's handler, which writes each event they yielded: one that the
			// stop cut has its last event say so, the stream did not end with the
			// task, which goes on; one that ended with its task, as the server
			// stopped, has no other.
			st := &streamStop{stopping: s.cfg.Stopping}
			r = r.WithContext(context.WithValue(r.Context(), streamStopKey{}, st))
			sent, sentID := w, id
			defer func() {
				if st.cut.Load() {
					writeStopped(sent, sentID, legacy)
				}
			}()
		}
		// What follows answers with a token for the id, which w writes as the id
		// was sent.
		sdkBody, sdkSize, id, w := echoID(w, rawID, *req.Method, req.Params)
		if m, ok := v1Methods[*req.Method]; ok {
			s.serveV1(w, r, next, m, id, req.Params)
			return
		}
		if why, ok := v1Unserved[*req.Method]; ok {
			refuse(-32601, fmt.Sprintf("method %q is not served: %s", *req.Method, why))
			return
		}
		if *req.Method == "message/send" || *req.Method == "message/stream" {
			if err := checkPartKindsV03(req.Params); err != nil {
				refuse(-32602, fmt.Sprintf("invalid params of %s: %v", *req.Method, err))
				return
			}
		}
		if params, ok := paramsOf[*req.Method]; ok {
			// The SDK calls params it cannot decode a parse error (-32700): the
			// request parsed, its params are what is wrong.
			if err := json.Unmarshal(req.Params, params()); err != nil {
				refuse(-32602, fmt.Sprintf("invalid params of %s: %v", *req.Method, err))
				return
			}
		}
		if *req.Method == "message/send" || *req.Method == "message/stream" {
			// What the spec makes invalid and the SDK lets through (parts.go).
			err := checkMessageV03(req.Params)
			if err == nil {
				err = checkAnswerMembers(req.Params)
			}
			if err != nil {
				refuse(-32602, fmt.Sprintf("invalid params of %s: %v", *req.Method, err))
				return
			}
		}
		r.Body = io.NopCloser(sdkBody)
		r.ContentLength = sdkSize
		if *req.Method == "tasks/pushNotificationConfig/delete" {
			// The SDK answers a delete with an empty body; JSON-RPC wants a response.
			ew := &emptyWriter{ResponseWriter: w}
			next.ServeHTTP(ew, r)
			if !ew.wrote {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": nil})
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// paramsOf makes, for each A2A 0.3 method the SDK serves, the value its params
// decode into there (a2asrv's JSON-RPC handler), so that guard answers params of
// the wrong shape with -32602 invalid params.
var paramsOf = map[string]func() any{
	"message/send":                        func() any { return new(sdk.MessageSendParams) },
	"message/stream":                      func() any { return new(sdk.MessageSendParams) },
	"tasks/get":                           func() any { return new(sdk.TaskQueryParams) },
	"tasks/cancel":                        func() any { return new(sdk.TaskIDParams) },
	"tasks/resubscribe":                   func() any { return new(sdk.TaskIDParams) },
	"tasks/pushNotificationConfig/get":    func() any { return new(sdk.GetTaskPushConfigParams) },
	"tasks/pushNotificationConfig/set":    func() any { return new(sdk.TaskPushConfig) },
	"tasks/pushNotificationConfig/list":   func() any { return new(sdk.ListTaskPushConfigParams) },
	"tasks/pushNotificationConfig/delete": func() any { return new(sdk.DeleteTaskPushConfigParams) },
}

// VersionHeader is the request header an A2A 1.0 client names its protocol
// version in ("1.0"; absent or empty: 0.3).
const VersionHeader = "A2A-Version"

// versionServed reports whether an A2A-Version header names a version served, by
// major and minor (a patch number does not count).
func versionServed(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	mm := parts[0] + "." + parts[1]
	return mm == "0.3" || mm == V1ProtocolVersion
}

// emptyWriter records whether a handler wrote anything.
type emptyWriter struct {
	http.ResponseWriter
	wrote bool
}

func (e *emptyWriter) WriteHeader(status int) { e.wrote = true; e.ResponseWriter.WriteHeader(status) }

func (e *emptyWriter) Write(p []byte) (int, error) {
	e.wrote = true
	return e.ResponseWriter.Write(p)
}

func (e *emptyWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// PushSender posts a task to the push-notification webhooks set for it, with
// retries and back-off, and refuses private, loopback and link-local targets
// (tools.AddressPolicy, the http_fetch rules) unless the allow list names them.
// Sending runs in the background: a slow webhook does not hold the task.
type PushSender struct {
	policy   *tools.AddressPolicy
	client   *http.Client
	logger   *slog.Logger
	attempts int
	backoff  time.Duration
	// endAttempts, endBackoffMax and endTimeout are the retries of a task's end
	// (a terminal state): a webhook restarting for a minute must not miss it,
	// while an update of a running task is soon superseded by the next.
	endAttempts   int
	endBackoffMax time.Duration
	endTimeout    time.Duration

	// queues order each task's notifications to each config: one post at a time,
	// in the order the updates came, so a webhook never sees a task go back (a
	// working posted after the completed, as concurrent posts with retries would).
	mu     sync.Mutex
	queues map[pushKey]*pushQueue
	// closed says Close was called: nothing is queued any more. life ends with
	// Close, and with it the posts in flight and their waits; drains are the
	// goroutines posting, which Close waits for.
	closed bool
	life   context.Context
	stop   context.CancelFunc
	drains sync.WaitGroup

	// final, when set, is told each task's end posted to a config: the webhook took
	// it, or refused it for good (status).
	final func(ctx context.Context, task sdk.TaskID, configID string, state sdk.TaskState, status int)
}

// pushKey is a task's config: the queue of its notifications.
type pushKey struct {
	task   sdk.TaskID
	config string
	url    string
}

// pushQueue is one config's notifications of one task not posted yet (of a run of
// updates in one state, only the latest: each is the whole task); running says
// a goroutine posts them; ended, that a terminal state was queued (later updates of
// an earlier state are not posted, nor those waiting before it); cut says to the
// post of an update of a running task in flight that the end queued supersedes it:
// it is not tried again.
type pushQueue struct {
	pending []pushItem
	running bool
	ended   bool
	cut     func()
}

// errSuperseded ends the tries of an update of a running task when the task's end
// is queued: the end, the whole task too, is posted next.
var errSuperseded = errors.New("a2a push: superseded by the task's end")

type pushItem struct {
	cfg   *sdk.PushConfig
	body  []byte
	state sdk.TaskState
	// current tells whether cfg is still the task's config (nil: not asked).
	current func(context.Context, sdk.TaskID, *sdk.PushConfig) bool
	// lease tells whether this node may post it now (nil: not asked).
	lease func(ctx context.Context, id sdk.TaskID, configID string, end, await bool) (bool, time.Duration)
}

// maxPushQueues bounds the queues a sender keeps; past it, idle ones are forgotten.
const maxPushQueues = 10_000

// The retries of a task's end (PushSender): 0.5 s, then doubling up to a minute
// between attempts (or what a 429 or 503 answer's Retry-After asks, up to as
// much), 14 attempts, within 10 minutes. An update of a running task is tried 4
// times, 0.5, 1 and 2 s apart.
const (
	pushEndAttempts   = 14
	pushEndBackoffMax = time.Minute
	pushEndTimeout    = 10 * time.Minute
)

// pushAttemptTimeout bounds an attempt to post a notification, and
// pushFinalTimeout the recording of an end posted (PushStore.Final): a lease of a
// task's notifications outlasts both (PushStore.lease).
const (
	pushAttemptTimeout = 15 * time.Second
	pushFinalTimeout   = 10 * time.Second
)

// pushIdleConnTimeout is how long a keep-alive connection to a webhook is kept
// unused (PushSender.Close closes them all).
const pushIdleConnTimeout = 90 * time.Second

// NewPushSender builds a sender with allow as its allow list.
func NewPushSender(allow []string, logger *slog.Logger) (*PushSender, error) {
	policy, err := tools.NewAddressPolicy(allow)
	if err != nil {
		return nil, fmt.Errorf("a2a: push allow list: %w", err)
	}
	s := &PushSender{policy: policy, logger: logger, attempts: 4, backoff: 500 * time.Millisecond,
		endAttempts: pushEndAttempts, endBackoffMax: pushEndBackoffMax, endTimeout: pushEndTimeout}
	s.life, s.stop = context.WithCancel(context.Background())
	tr := &http.Transport{DialContext: s.dial, TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 10 * time.Second,
		IdleConnTimeout: pushIdleConnTimeout}
	s.client = &http.Client{Timeout: pushAttemptTimeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return s, nil
}

// CheckURL refuses, with sdk.ErrInvalidParams saying why, a webhook URL no push
// would be sent to: one that is not http(s) with a host, or whose host is an
// address (or localhost) the push policy refuses. A host name is resolved when a
// push is sent, not here: one that resolves to a refused address is refused then
// (and logged).
func (s *PushSender) CheckURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("%w: a push config needs a url", sdk.ErrInvalidParams)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%w: push config url %q: want an http or https URL with a host", sdk.ErrInvalidParams, raw)
	}
	host := u.Hostname()
	if s.policy.AllowsHost(host) {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil && strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		ip, err = netip.IPv6Loopback(), nil
	}
	if err != nil {
		return nil
	}
	if why := s.policy.Refuses(ip); why != "" {
		return fmt.Errorf("%w: push config url %q: %s is %s, where pushes are not sent unless the node's a2a.push_allow names it", sdk.ErrInvalidParams, raw, host, why)
	}
	return nil
}

// dial connects to addr as the push policy allows (tools.AddressPolicy.Dial).
func (s *PushSender) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.policy.Dial(ctx, network, addr, func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	})
}

// SendPush implements a2asrv.PushSender: it checks the webhook's URL and sends in
// the background. A running task whose answer artifact holds streamed text
// (PartialKey) is not sent: the SDK pushes the task at each event, and a model
// streams an event a token; the task is sent again when its model's answer is
// recorded. The task is posted as A2A 0.3 has it (a config of a 1.0 client:
// PushStore's sender posts 1.0's StreamResponse).
func (s *PushSender) SendPush(ctx context.Context, cfg *sdk.PushConfig, task *sdk.Task) error {
	return s.push(ctx, cfg, task, false, nil, nil)
}

// push is SendPush, posting the task as A2A 1.0's StreamResponse ({"task": …} in
// 1.0's JSON, as the 1.0 SDKs post a notification and parse one) when v1. current
// (nil: none), asked before each retry, tells whether cfg is still the task's
// config (PushStore.Current): one deleted, or set again with another URL or
// token, gets no more of the task's notifications. lease (nil: none), asked
// before each attempt, tells whether this node may post it now (PushStore.lease).
func (s *PushSender) push(ctx context.Context, cfg *sdk.PushConfig, task *sdk.Task, v1 bool, current func(context.Context, sdk.TaskID, *sdk.PushConfig) bool,
	lease func(ctx context.Context, id sdk.TaskID, configID string, end, await bool) (bool, time.Duration)) error {
	if !task.Status.State.Terminal() {
		for _, a := range task.Artifacts {
			if partial, _ := a.Metadata[PartialKey].(bool); partial {
				return nil
			}
		}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.logger.Warn("a2a push: not an http(s) URL; not sent", "url", redact.URL(cfg.URL))
		return nil
	}
	body, err := json.Marshal(task)
	if err != nil {
		return err
	}
	if v1 {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return err
		}
		if body, err = json.Marshal(map[string]any{"task": v1Task(m)}); err != nil {
			return err
		}
	}
	c := *cfg
	key := pushKey{task: task.ID, config: cfg.ID, url: cfg.URL}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		// The node stops: a post now could land after those of the node that
		// follows the task next. Its end, not recorded as posted, is posted by
		// the next node that starts (Server.ResumePushes), or by a node that
		// runs (Server.FinishPushes).
		return nil
	}
	if s.queues == nil {
		s.queues = map[pushKey]*pushQueue{}
	}
	q := s.queues[key]
	if q == nil {
		if len(s.queues) >= maxPushQueues {
			for k, idle := range s.queues {
				if !idle.running {
					delete(s.queues, k)
				}
			}
		}
		q = &pushQueue{}
		s.queues[key] = q
	}
	if q.ended && !task.Status.State.Terminal() {
		return nil // an update from before the end, come late
	}
	it := pushItem{cfg: &c, body: body, state: task.Status.State, current: current, lease: lease}
	if it.state.Terminal() && !q.ended {
		// The end says all the updates before it say (each post is the whole
		// task): those waiting are not posted, the one in flight is not tried
		// again, so that a webhook down or slow hears of the end first, not
		// after each of them was tried 4 times (10 s each when unanswered).
		// The attempt in flight is not cut: its request may have reached the
		// webhook, which would then take it after the end (a working heard
		// after the completed); the end is posted once it is answered (or its
		// attempt times out).
		q.pending = slices.DeleteFunc(q.pending, func(p pushItem) bool { return !p.state.Terminal() })
		if q.cut != nil {
			q.cut()
		}
	}
	q.ended = q.ended || it.state.Terminal()
	if n := len(q.pending); n > 0 && q.pending[n-1].state == it.state && !it.state.Terminal() {
		// A newer snapshot of the state the last one waiting has: each post is
		// the whole task, so the older says nothing the newer does not. Without
		// this a webhook that was down while a task ran was owed every update
		// (memory growing with the square of the task's steps), and got the
		// task's end only after them all.
		q.pending[n-1] = it
	} else {
		q.pending = append(q.pending, it)
	}
	if !q.running {
		q.running = true
		s.drains.Add(1)
		go func() {
			defer s.drains.Done()
			s.drain(q, task.ID)
		}()
	}
	return nil
}

// drain posts q's notifications in order until none is left, or the sender
// closes.
func (s *PushSender) drain(q *pushQueue, task sdk.TaskID) {
	for {
		s.mu.Lock()
		if len(q.pending) == 0 || s.life.Err() != nil {
			q.running = false
			s.mu.Unlock()
			return
		}
		it := q.pending[0]
		q.pending[0] = pushItem{}
		q.pending = q.pending[1:]
		if it.state.Terminal() {
			s.mu.Unlock()
			if s.send(s.life, it, task, nil) {
				s.dropQueued(q, it.cfg)
			}
			continue
		}
		superseded := make(chan struct{})
		q.cut = sync.OnceFunc(func() { close(superseded) })
		s.mu.Unlock()
		gone := s.send(s.life, it, task, superseded)
		s.mu.Lock()
		q.cut = nil
		s.mu.Unlock()
		if gone {
			s.dropQueued(q, it.cfg)
		}
	}
}

// dropQueued forgets the notifications q holds for cfg, a config deleted or
// changed (not those queued since with the config as it was set again).
func (s *PushSender) dropQueued(q *pushQueue, cfg *sdk.PushConfig) {
	s.mu.Lock()
	q.pending = slices.DeleteFunc(q.pending, func(p pushItem) bool { return p.cfg.Token == cfg.Token })
	s.mu.Unlock()
}

// errConfigGone ends the tries of a notification whose config was deleted, or
// set again with another URL or token, since it was queued.
var errConfigGone = errors.New("a2a push: the push config was deleted or changed")

// awaited says whether a notification of a task in state st waits for the
// lease of the task's notifications (PushStore.lease) rather than being left to
// the node that holds it: the task's end, and a task waiting for its client
// (input or authentication), which may post nothing more for a long while, so
// that a webhook that missed it would never learn the task waits.
func awaited(st sdk.TaskState) bool {
	return st.Terminal() || st == sdk.TaskStateInputRequired || st == sdk.TaskStateAuthRequired
}

// errNotHolder ends the tries of a notification that another node posts, or has
// posted (PushStore.lease): an update of the running task while another node
// holds the task's lease, an end another node posted.
var errNotHolder = errors.New("a2a push: another node posts the task's notifications")

// busy reports whether a post of task to cfg is queued or in flight.
func (s *PushSender) busy(task sdk.TaskID, cfg *sdk.PushConfig) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[pushKey{task: task, config: cfg.ID, url: cfg.URL}]
	return q != nil && (q.running || len(q.pending) > 0)
}

// Close stops the sender: nothing is queued after it, the posts in flight and
// their retries end, and it returns once none runs, so that nothing is posted
// after it returns (where the next node that follows a task posts). What was
// queued and not posted is not: a task's end, not recorded as posted
// (PushStore.Final), is posted by the next node that starts
// (Server.ResumePushes), or by a node that runs (Server.FinishPushes). Its keep-alive connections to webhooks are closed. It
// is idempotent.
func (s *PushSender) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.drains.Wait()
	s.client.CloseIdleConnections()
	return nil
}

// Send posts body to cfg's URL, trying again after a failure or a 3xx, 5xx or 429
// answer with doubling back-off; it returns the last error.
func (s *PushSender) Send(ctx context.Context, cfg *sdk.PushConfig, body []byte) error {
	_, err := s.post(ctx, cfg, body)
	return err
}

// post is Send, also returning the webhook's last answer (0: none).
func (s *PushSender) post(ctx context.Context, cfg *sdk.PushConfig, body []byte) (status int, err error) {
	return s.postTries(ctx, cfg, body, s.attempts, 0, nil, nil, nil)
}

// postTries is post with attempts tries, the back-off doubling up to most (0: no
// bound) and taking a Retry-After answer up to most. Once superseded closes (nil:
// never), no attempt follows the one in flight, which is not cut: its error
// wraps errSuperseded. Before each retry, current (nil: none) tells whether cfg
// is still its task's config: when not, none follows, and the error wraps
// errConfigGone. Right before each attempt, claim (nil: none) tells whether this
// node may post now: when not, none follows (the error wraps errNotHolder), or,
// with a wait, it is asked again after it.
func (s *PushSender) postTries(ctx context.Context, cfg *sdk.PushConfig, body []byte, attempts int, most time.Duration, superseded <-chan struct{}, current func() bool,
	claim func() (bool, time.Duration)) (status int, err error) {
	var last error
	wait, asked := s.backoff, time.Duration(0)
	for i := 0; i < attempts; i++ {
		if i > 0 {
			pause := max(wait, asked)
			if most > 0 {
				pause = min(pause, most)
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				if last != nil {
					return status, fmt.Errorf("%w (then %w)", last, ctx.Err())
				}
				return status, ctx.Err()
			case <-superseded:
				t.Stop()
			case <-t.C:
			}
			select {
			case <-superseded:
				return status, fmt.Errorf("%w (then %w)", last, errSuperseded)
			default:
			}
			if current != nil && !current() {
				return status, fmt.Errorf("%w (then %w)", last, errConfigGone)
			}
			wait *= 2
			if most > 0 {
				wait = min(wait, most)
			}
		}
		asked = 0
		for claim != nil {
			ok, wait := claim()
			if ok {
				break
			}
			if wait <= 0 {
				if last != nil {
					return status, fmt.Errorf("%w (then %w)", last, errNotHolder)
				}
				return status, errNotHolder
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return status, fmt.Errorf("%w: %w", errNotHolder, ctx.Err())
			case <-superseded:
				t.Stop()
				return status, fmt.Errorf("%w: %w", errSuperseded, errNotHolder)
			case <-t.C:
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
		if err != nil {
			return status, err
		}
		req.Header.Set("Content-Type", "application/json")
		if cfg.Token != "" {
			req.Header.Set("X-A2A-Notification-Token", cfg.Token)
		}
		if cfg.Auth != nil && cfg.Auth.Credentials != "" {
			for _, scheme := range cfg.Auth.Schemes {
				if strings.EqualFold(scheme, "bearer") {
					req.Header.Set("Authorization", "Bearer "+cfg.Auth.Credentials)
					break
				}
			}
		}
		resp, err := s.client.Do(req)
		if err != nil {
			last = err
			if errors.Is(err, tools.ErrAddressRefused) {
				return status, err
			}
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		status = resp.StatusCode
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return status, nil
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			// A redirect is not a delivery, and is not followed (the target it
			// names was never checked against the allow list): a failure, tried
			// again as a 5xx is.
			last = fmt.Errorf("webhook answered %s (a redirect, not followed)", resp.Status)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			last = fmt.Errorf("webhook answered %s", resp.Status)
			if most > 0 {
				asked = retryAfter(resp.Header.Get("Retry-After"))
			}
		default:
			return status, fmt.Errorf("webhook answered %s", resp.Status)
		}
	}
	return status, last
}

// retryAfter reads a Retry-After header given in seconds (0: none, or a date).
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 24*3600)) * time.Second
}

// send posts it, a notification of task, with its tries; an update of a running
// task is not tried again once superseded closes (the task's end is queued). gone
// says its config was deleted (or changed) meanwhile: it was not tried again, and
// what is queued for the config is not for it.
func (s *PushSender) send(ctx context.Context, it pushItem, task sdk.TaskID, superseded <-chan struct{}) (gone bool) {
	cfg := it.cfg
	var (
		status int
		err    error
	)
	var current func() bool
	if it.current != nil {
		current = func() bool {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return it.current(cctx, task, cfg)
		}
	}
	var claim func() (bool, time.Duration)
	if it.lease != nil {
		claim = func() (bool, time.Duration) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return it.lease(cctx, task, cfg.ID, it.state.Terminal(), awaited(it.state))
		}
	}
	if it.state.Terminal() {
		ctx, cancel := context.WithTimeout(ctx, s.endTimeout)
		status, err = s.postTries(ctx, cfg, it.body, s.endAttempts, s.endBackoffMax, nil, current, claim)
		cancel()
	} else {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		status, err = s.postTries(ctx, cfg, it.body, s.attempts, 0, superseded, current, claim)
		cancel()
	}
	// The end is posted when the webhook took it, or refused it for good: a 4xx
	// other than 429 comes again however often it is sent. A redirect took nothing.
	// That it was is recorded even as the sender closes (Close waits for it).
	if it.state.Terminal() && s.final != nil && (status >= 200 && status < 300 || status >= 400 && status < 500 && status != http.StatusTooManyRequests) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushFinalTimeout)
		s.final(fctx, task, cfg.ID, it.state, status)
		cancel()
	}
	if errors.Is(err, errSuperseded) {
		return false // the task's end is posted next
	}
	if errors.Is(err, errNotHolder) && errors.Is(err, context.DeadlineExceeded) && awaited(it.state) {
		// Another node held the lease all along (or the log refused it): maybe
		// none posted it.
		s.logger.Warn("a2a push notification not posted: the lease of the task's notifications could not be taken in time (another node holds it, or the log failed); a node posts a task's end not posted again within the hour",
			"task", task, "config", cfg.ID, "state", it.state, "err", err)
		return false
	}
	if errors.Is(err, errNotHolder) {
		s.logger.Debug("a2a push notification left to the node that holds the task's lease (or that posted the task's end)", "task", task, "config", cfg.ID, "state", it.state, "err", err)
		return false
	}
	if errors.Is(err, errConfigGone) {
		s.logger.Info("a2a push notification not tried again: its config was deleted or changed", "task", task, "config", cfg.ID, "url", redact.URL(cfg.URL))
		return true
	}
	if err != nil {
		s.logger.Warn("a2a push notification not delivered", "task", task, "url", redact.URL(cfg.URL), "err", pushError(err, cfg.URL))
	}
	return false
}

// pushError is the text of err, a failed post to rawURL, with the URL's credentials
// (?token=..., a password) redacted as the event and the "url" of the log line have
// them (redact.URL): whatever their length, wherever the error names the URL, as
// given or as Go's HTTP client prints it (a *url.Error: the password masked, the
// query whole). A Redactor replaces the longer ones elsewhere in the text too.
func pushError(err error, rawURL string) string {
	text := err.Error()
	forms := []string{rawURL}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		forms = append(forms, uerr.URL)
	}
	for _, f := range forms {
		if f != "" {
			text = strings.ReplaceAll(text, f, redact.URL(f))
		}
	}
	return redact.New(redact.URLSecrets(rawURL)...).String(text)
}
