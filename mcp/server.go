package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/ssekeepalive"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// PrincipalHeader is the request header in which Handler passes to the
// server's tool handlers who a request is signed in as (node.RequestPrincipal):
// a keyed direct call names a call among that principal's, so that a client
// that lost its session and sends its call again from a new one, with the same
// idempotency key and token, gets the first call's answer. A node without
// tokens knows no principal: the call's caller is then the client's session. A
// client's own header of that name is dropped.
const PrincipalHeader = "Troupe-Principal"

// CallerNode is the optional capability of a Node to tell its callers apart
// (*node.Node has it): CallToolFor is CallTool whose key names a call among
// caller's only, the principal the request is signed in as (PrincipalHeader),
// else the ID of the client's session, so that two clients that name
// their calls alike make two calls, under two names outside the node.
type CallerNode interface {
	CallToolFor(ctx context.Context, caller, key, name, arguments string) (string, error)
}

var _ CallerNode = (*node.Node)(nil)

// Node is what Server serves; *node.Node implements it.
type Node interface {
	// ToolSpecs returns the tools of the node's default agent now, sorted by name.
	ToolSpecs() []messages.ToolSpec
	// CallTool calls a tool through the node's effects (timeouts, limits,
	// cancellation through ctx); key, when not empty, is the call's idempotency key.
	// A Node that is a CallerNode too is called through CallToolFor instead.
	CallTool(ctx context.Context, key, name, arguments string) (string, error)
	// RunTask submits a task and waits for its end.
	RunTask(ctx context.Context, t node.Task) (messages.TaskResult, error)
}

var _ Node = (*node.Node)(nil)

// RunTask is the name of the tool that runs a task on the node's agent.
const RunTask = "run_task"

// SessionIDMeta is the _meta key of run_task's result that names the task's session:
// pass it back as session_id to go on with the conversation.
const SessionIDMeta = "troupe/session_id"

// TaskIDMeta is the _meta key of run_task's result that names the task: its
// task_id when the call gave one (node.Task.TaskID), else the ID the node gave it
// (messages.TaskResult.TaskID).
const TaskIDMeta = "troupe/task_id"

// ServerOptions configures a Server.
type ServerOptions struct {
	// Changed, when set, returns a channel closed at the next change of the node's
	// tools (Client.Changed): Run then offers the new list, and the SDK tells the
	// connected clients (notifications/tools/list_changed).
	Changed func() <-chan struct{}
	// Sources offer the server's resources, resource templates and prompts (the
	// node's skills, the MCP servers the node is a client of, a fixed Catalog); they
	// are offered again at each change (Changed).
	Sources []Source
	// ProgressInterval is how often a tool call or run_task that runs on tells a
	// client that asked for progress (a progressToken) that it still runs, and logs
	// so at debug level; default 5s.
	ProgressInterval time.Duration
	// SessionTimeout is how long a client's session lives once the client stops
	// answering (default 30 minutes). The server pings each client every
	// SessionTimeout/30 (an MCP ping; over Streamable HTTP on the client's stream of
	// notifications): a client that answers keeps its session however long it
	// idles. Over stdio, one that for SessionTimeout answers none, sends no
	// message and has none of its requests open loses it (the server stops).
	// Over Streamable HTTP, where an answer is a request, one that sends no
	// request for SessionTimeout, with none of its requests (nor a call's
	// stream it resumed) open meanwhile, loses it (the server forgets it, and
	// resumes it at the client's next request as after a restart: see Handler),
	// so that a client without a stream of notifications, which can answer no
	// ping, keeps its session while it sends requests or waits for a call's
	// answer.
	SessionTimeout time.Duration
	// ReconnectDelay is how long a client whose stream of a call, or of
	// notifications, was cut waits before it resumes the stream (the stream's
	// retry, which the SDKs follow; default 2s): the official SDKs try twice, so a
	// node that restarts within twice this gives its clients their answers
	// (server_calls.go) and their notifications.
	ReconnectDelay time.Duration
	// StartGrace is how long the resumed stream of a run_task call whose task is
	// not in the log yet waits for it before it answers that the task never
	// started (default 30s): the call is recorded before its task is submitted,
	// and on a cluster the task travels through Kafka, where it waits out a
	// rebalance when the node that owned its session died with the call; a
	// client told at once to send its call again would, with a new request ID,
	// start a second task beside the one still on its way.
	StartGrace time.Duration
	// MaxRequestBytes bounds the body of a request over Streamable HTTP (Handler;
	// default MaxRequestBytes). Set it to the bound the server's route puts on
	// r.Body, if lower: a request whose Content-Length is above it is answered 413
	// at once, before its body is read, rather than once that much of it came.
	MaxRequestBytes int64
	// MaxSessions bounds the sessions over Streamable HTTP the server holds at
	// once (default DefaultMaxSessions): past it, a session started or resumed
	// closes the one whose last request is the oldest and that has no request,
	// call or stream (GET) under way (its client's next request resumes it, as
	// after a restart; one sent while the session closes waits for the close),
	// so that a client opening sessions in a loop without deleting them grows
	// nothing for good. A session whose client holds its stream open is not
	// closed (the client would open it again at once, resuming the session): the
	// server holds more sessions than this only while more than this many have
	// a stream held or a request under way, bounded by the connections it takes.
	MaxSessions int
	// WriteTimeout bounds each write of an answer or a notification over
	// Streamable HTTP (Handler; default DefaultWriteTimeout): a client that takes
	// none of a write's bytes for this long (it stopped reading, its receive
	// window is full) has its stream cut. The route's own write deadline is
	// lifted, since a run_task's answer and a stream of notifications last, but
	// without a bound of each write the SDK, which writes a notification to each
	// session in turn, held the notifications of every client (and the caller of
	// ResourceUpdated) behind one that reads nothing. Writes are cut in pieces of
	// writePiece bytes, each with its own deadline, so that a large answer to a
	// slow client is not cut for its size.
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

// DefaultWriteTimeout is the default of ServerOptions.WriteTimeout.
const DefaultWriteTimeout = 30 * time.Second

// writePiece is the most bytes written under one write deadline
// (ServerOptions.WriteTimeout).
const writePiece = 64 << 10

// DefaultStartGrace is the default of ServerOptions.StartGrace.
const DefaultStartGrace = 30 * time.Second

// StreamKeepAlive is how long a client's stream of notifications (the GET of
// Streamable HTTP) stays silent before the server writes an SSE comment
// (": keep-alive", which clients ignore) on it: well within the read timeout of
// the proxies in front of servers (nginx's proxy_read_timeout and common load
// balancers' idle timeouts are a minute), which would otherwise cut a stream with
// nothing to notify between two of the server's pings. The Python SDK's client
// gives its stream of notifications up after two cuts in a row.
const StreamKeepAlive = 15 * time.Second

// sessionPings is how many pings a client may leave unanswered in a row before
// its session ends: SessionTimeout is this many ping intervals.
const sessionPings = 30

// Server serves a node's tools and run_task over MCP. Serve it over stdio
// (ServeStdio) or Streamable HTTP (Handler), and keep its tool list current with
// Run. It is safe for concurrent use.
type Server struct {
	n    Node
	opts ServerOptions
	srv  *sdk.Server

	mu      sync.Mutex
	specs   map[string]messages.ToolSpec // the node's tools offered now, by name
	offered offered                      // the sources' resources and prompts offered now

	subMu sync.Mutex
	subs  map[string]map[*sdk.ServerSession]bool // the sessions subscribed to each URI
	// awaited holds the subscribed sessions whose end forgetOnEnd waits for.
	awaited map[*sdk.ServerSession]bool

	ids     sessionIDs   // the IDs of new sessions over Streamable HTTP
	use     sessionUse   // the sessions over Streamable HTTP by their last request (server_cap.go)
	book    *sessionBook // the sessions' log levels, subscriptions and calls
	events  *eventStore  // the events of the streams over Streamable HTTP
	pending sync.Map     // the run_task calls on their way to the handler, by token (*pendingCall)
	writers sync.Map     // the request writing each stream (streamKey → *streamWriter; server_takeover.go)

	callsMu sync.Mutex
	calls   map[string]map[*follower]bool // the calls under way, by their session's ID (Streamable HTTP)

	live    liveIndex // the live sessions over Streamable HTTP, by ID (server_live.go)
	idLocks idLocks   // a session's resumption and a DELETE's record, one at a time
	lives   sync.Map  // the signs of life of the sessions Serve serves, by session (*sdk.ServerSession to *life)
	// listed, when set (tests), counts the sessions read off the SDK's list.
	listed *atomic.Int64
	// afterEndedCheck, when set (tests), runs after a request in a session the
	// server does not hold found it not ended, before it resumes it or records
	// its end.
	afterEndedCheck func(r *http.Request)
	// admitted, when set (tests), runs as a request in a session the server
	// holds is about to be handed to the SDK's handler.
	admitted func(r *http.Request)
	// capClosing, when set (tests), runs as capSessions is about to close session
	// id, which it marked closing.
	capClosing func(id string)
	// capClosed, when set (tests), runs once the SDK's Close of session id,
	// which capSessions closes, returned, before the session stops being marked
	// closing.
	capClosed func(id string)
	// waitingClose, when set (tests), runs as a request in session id starts
	// waiting for capSessions to close it.
	waitingClose func(id string)

	closing     chan struct{}   // closed by CloseStreams
	closed      context.Context // ends at CloseStreams
	closeCtx    context.CancelFunc
	closingOnce sync.Once
}

// NewServer returns a server of n, offering n's tools as they are now and run_task.
func NewServer(n Node, opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 5 * time.Second
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.ReconnectDelay <= 0 {
		opts.ReconnectDelay = 2 * time.Second
	}
	if opts.StartGrace <= 0 {
		opts.StartGrace = DefaultStartGrace
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	s := &Server{n: n, opts: opts, specs: map[string]messages.ToolSpec{}, subs: map[string]map[*sdk.ServerSession]bool{}, awaited: map[*sdk.ServerSession]bool{}, calls: map[string]map[*follower]bool{},
		closing: make(chan struct{}), book: newSessionBook(n), events: newEventStore()}
	caps := &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}, Logging: &sdk.LoggingCapabilities{}}
	sopts := &sdk.ServerOptions{
		Instructions: "The tools of a Troupe node's agent, and run_task, which runs a task on the agent and answers with its final output.",
		Logger:       sdkLogger(opts.Logger),
		Capabilities: caps,
		// An answered ping is a request of the client's: over Streamable HTTP it
		// keeps the session from timing out while the client idles (an open stream
		// of notifications does not). The SDK never ends a session for the pings
		// it missed: over Streamable HTTP the handler's SessionTimeout ends one
		// whose client sent no request for that long, and it does not run while a
		// request is open, so that a client without a stream of notifications
		// (GET), which can answer no ping, keeps its session while it waits for a
		// call's answer or goes on sending requests. Ended for its missed pings,
		// such a client lost its session SessionTimeout after it began, and the
		// call it then waited for with it. Over stdio, Serve ends the session.
		KeepAlive:                 opts.SessionTimeout / sessionPings,
		KeepAliveFailureThreshold: math.MaxInt,
		GetSessionID:              s.ids.id,
	}
	if len(opts.Sources) > 0 {
		caps.Resources = &sdk.ResourceCapabilities{ListChanged: true, Subscribe: true}
		caps.Prompts = &sdk.PromptCapabilities{ListChanged: true}
		caps.Completions = &sdk.CompletionCapabilities{}
		sopts.SubscribeHandler = s.subscribe
		sopts.UnsubscribeHandler = s.unsubscribe
		sopts.CompletionHandler = s.complete
		for _, src := range opts.Sources {
			if u, ok := src.(UpdatingSource); ok {
				u.OnUpdated(func(ctx context.Context, uri string) { _ = s.ResourceUpdated(ctx, uri) })
			}
		}
	}
	s.closed, s.closeCtx = context.WithCancel(context.Background())
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "troupe", Title: "Troupe node", Version: version()}, sopts)
	s.srv.AddReceivingMiddleware(s.recoverPanics, s.trackLive, s.recordLevel, s.recordLife, legacyNotFound)
	s.srv.AddTool(&sdk.Tool{Name: RunTask, Title: "Run a task on the Troupe agent",
		Description: "Run a task on the node's agent and answer with its final output. Give session_id (from an earlier answer's _meta " +
			SessionIDMeta + ") to go on with a conversation. A failed task is an error with the reason. A task goes on when its call is " +
			"cut off (the connection dropped, the node restarted): " + TaskResult + " with its session (named by the progress messages) gets its result. " +
			"Give task_id, a name of your own for the task, to make calling again safe: run_task again with the same task_id (and session_id) " +
			"answers with the result of that one task, waiting for it while it runs, instead of running it again; a named task goes on when " +
			"its call ends early (a timeout, a cancellation). The answer's _meta " + TaskIDMeta + " names the task.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"the task, in words"},` +
			`"session_id":{"type":"string","description":"the session to continue; a new one when absent"},` +
			`"task_id":{"type":"string","description":` + taskIDHelp() + `},` +
			`"agent":{"type":"string","description":"the agent to run (this node runs \"default\")"},` +
			`"max_tokens":{"type":"integer","minimum":0,"description":"the task's token budget, prompt and completion tokens together; absent: the agent's"},` +
			`"max_cost_usd":{"type":"number","minimum":0,"description":"the task's cost budget in US dollars, by the node's price table; absent: the agent's"}},` +
			`"required":["input"],"additionalProperties":false}`),
		Annotations: &sdk.ToolAnnotations{OpenWorldHint: ptr(true)},
	}, s.runTask)
	s.addTaskResult()
	s.sync()
	return s
}

func ptr[T any](v T) *T { return &v }

// taskIDHelp describes run_task's task_id, as a JSON string. The node's ingress
// checks it (node.Task.Validate), as it checks a task body's.
func taskIDHelp() string {
	b, _ := json.Marshal("your name for the task, " + node.TaskIDRule + ": the same task_id sent again (to the same session_id) " +
		"is the same task, run once, and answers with its result; without session_id the task runs in session task.<task_id>")
	return string(b)
}

// Run keeps the offered tools equal to the node's until ctx ends (with
// ServerOptions.Changed), and keeps the streams of the live sessions in the
// node's log while it prunes those of the sessions that ended or expired
// (server_prune.go) until ctx ends or CloseStreams. It returns nil.
func (s *Server) Run(ctx context.Context) error {
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		s.pruneSessions(ctx)
	}()
	defer func() { <-pruned }()
	if s.opts.Changed == nil {
		<-ctx.Done()
		return nil
	}
	for {
		changed := s.opts.Changed()
		s.sync()
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// sync offers the node's tools and the sources' resources and prompts as they are
// now: new ones are added, changed ones replaced, gone ones removed (each change is
// announced to clients by the SDK).
func (s *Server) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncCatalog()
	now := map[string]messages.ToolSpec{}
	var own []string // the disclosure strategy's tools, which load tools into a session's requests
	if d, ok := s.n.(disclosing); ok {
		own = d.DisclosureTools()
	}
	for _, spec := range s.n.ToolSpecs() {
		if spec.Name == RunTask || spec.Name == TaskResult {
			s.opts.Logger.Warn("mcp server: the node's tool is hidden by the server's own", "tool", spec.Name)
			continue
		}
		if slices.Contains(own, spec.Name) {
			continue
		}
		now[spec.Name] = spec
	}
	var gone []string
	for name := range s.specs {
		if _, ok := now[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		s.srv.RemoveTools(gone...)
		for _, name := range gone {
			delete(s.specs, name)
		}
	}
	for _, name := range sortedKeys(now) {
		spec := now[name]
		if old, ok := s.specs[name]; ok && old.Description == spec.Description && bytes.Equal(old.Parameters, spec.Parameters) {
			continue
		}
		var params any = map[string]any{}
		if len(spec.Parameters) > 0 {
			params = json.RawMessage(spec.Parameters)
		}
		schema, err := objectSchema(params)
		if err != nil {
			s.opts.Logger.Warn("mcp server: tool not offered", "tool", name, "err", err)
			continue
		}
		s.srv.AddTool(&sdk.Tool{Name: name, Description: spec.Description, InputSchema: schema}, s.callTool(name))
		s.specs[name] = spec
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// callTool is the handler of the node's tool name: the call goes through the node's
// effects under the request's context, so a cancelled request cancels the tool. A
// key given in the request's _meta (IdempotencyKeyMeta) is the call's key among the
// calls of the client's session (node.CallToolFor): a second call with it is
// answered without calling the tool again, while the node remembers, and another
// client's call with the same key is another call.
func (s *Server) callTool(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := "{}"
		if req.Params != nil && len(req.Params.Arguments) > 0 {
			args = string(req.Params.Arguments)
		}
		key := ""
		if req.Params != nil {
			if v, given := req.Params.Meta[IdempotencyKeyMeta]; given {
				k, ok := v.(string)
				if !ok || k == "" {
					// A key the call would run without: its caller meant it to run once.
					got, _ := json.Marshal(v)
					return errorResult(fmt.Sprintf("%s: _meta %q must be a non-empty string, the call's key of your choice; got %.40s",
						name, IdempotencyKeyMeta, got)), nil
				}
				key = k
			}
		}
		s.recordCall(ctx, req, name, args, "")
		f, ctx := s.follow(ctx, req.Session, req.Params, "tool "+name)
		var out string
		var err error
		if cn, ok := s.n.(CallerNode); ok {
			caller := ""
			if req.Extra != nil && req.Extra.Header.Get(PrincipalHeader) != "" {
				caller = req.Extra.Header.Get(PrincipalHeader)
			} else if req.Session != nil {
				caller = req.Session.ID()
			}
			out, err = cn.CallToolFor(ctx, caller, key, name, args)
		} else {
			out, err = s.n.CallTool(ctx, key, name, args)
		}
		f.end(ctx, err)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if isClosed(s.closing) {
				// The node stops under the call (which it may have cut).
				return nil, &jsonrpc.Error{Code: codeCallCut, Message: callCutMessage + ": " + err.Error()}
			}
			return errorResult(err.Error()), nil
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out}}}, nil
	}
}

func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// runTask is run_task's handler.
func (s *Server) runTask(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	var args struct {
		Input     string  `json:"input"`
		SessionID string  `json:"session_id"`
		Agent     string  `json:"agent"`
		MaxTokens int     `json:"max_tokens"`
		MaxCost   float64 `json:"max_cost_usd"`
		TaskID    *string `json:"task_id"`
	}
	raw := "{}"
	if req.Params != nil && len(req.Params.Arguments) > 0 {
		raw = string(req.Params.Arguments)
	}
	if err := decodeStrict(RunTask, raw, &args, `{"input":"What is 2+2?"}`); err != nil {
		return errorResult(err.Error()), nil
	}
	if args.TaskID != nil && *args.TaskID == "" {
		// As a task body's (node.DecodeTask): an empty name is no name.
		return errorResult(fmt.Sprintf("%s: %v: task_id is empty: it must be %s, or left out", RunTask, node.ErrBadTask, node.TaskIDRule)), nil
	}
	if args.TaskID == nil && nullTaskID(raw) {
		// As a task body's: a client that meant to name the task and sent null
		// would otherwise run it unnamed, again at each call.
		return errorResult(fmt.Sprintf("%s: %v: task_id must be a string (%s), or left out; got null", RunTask, node.ErrBadTask, node.TaskIDRule)), nil
	}
	task := node.Task{Input: args.Input, SessionID: args.SessionID, Agent: args.Agent, MaxTokens: args.MaxTokens, MaxCostUSD: args.MaxCost}
	if args.TaskID != nil {
		task.TaskID = *args.TaskID
	}
	var started *messages.MCPCallStarted // the call's record, when it has one
	// A call over Streamable HTTP is recorded (not a task the node refuses: bad
	// input changes nothing). A named task's session and ID are its name's, the
	// same at each call that names it: the ingress's.
	in, admits := s.n.(admitter)
	if c := s.takeCall(req); c != nil && req.Session != nil && req.Session.ID() != "" && task.Validate() == nil && (task.TaskID == "" || admits) {
		rec := messages.MCPCallStarted{RequestID: c.rpcID, Stream: c.streamID(), ArgsHash: argsHash(raw), TaskSession: task.SessionID,
			ProgressToken: progressToken(req.Params)}
		if task.TaskID != "" {
			env, err := in.Ingress().Admit(task)
			if err != nil {
				return errorResult(err.Error()), nil
			}
			rec.TaskSession, rec.TaskID = env.SessionID, env.ID
		}
		again, err := s.startCall(ctx, req.Session.ID(), &rec)
		if err != nil {
			s.opts.Logger.Warn("mcp server: run_task call not recorded", "session", req.Session.ID(), "err", err)
			return errorResult(fmt.Sprintf("run_task: the call could not be recorded, and the task was not started: %v", err)), nil
		}
		if again {
			return s.callAgain(ctx, req, rec)
		}
		task.SessionID, started = rec.TaskSession, &rec
		if task.TaskID == "" {
			task.ID = rec.TaskID
		}
	}
	f, ctx := s.follow(ctx, req.Session, req.Params, RunTask)
	if started != nil {
		defer s.closeOnStop(req)()
	}
	var res messages.TaskResult
	var err error
	if each, ok := s.n.(taskFollower); ok {
		res, err = each.RunTaskEach(ctx, task, func(e messages.Envelope) { f.event(ctx, e) })
	} else {
		res, err = s.n.RunTask(ctx, task)
	}
	outcome := err
	if err == nil && res.Status != messages.StatusCompleted {
		outcome = fmt.Errorf("the task failed (session %s, reason %s): %s", res.SessionID, res.Reason, res.Error)
	}
	f.end(ctx, outcome)
	if started != nil && err != nil && !errors.Is(err, node.ErrBadTask) && ctx.Err() == nil && isClosed(s.closing) {
		// The node stops and the task goes on when it serves again: this
		// process does not answer (its answer would reach no one, or a client
		// that resumes the stream here before the node is gone), the next does.
		return nil, s.awaitCut(ctx, req.Session)
	}
	meta := taskMeta(res)
	switch {
	case errors.Is(err, node.ErrBadTask):
		return errorResult(err.Error()), nil
	case errors.Is(err, actors.ErrQueueFull):
		// Nothing was recorded: the same call made again once the session's
		// waiting tasks have run is taken (node.Config.MaxQueuedTasks).
		return errorResult(fmt.Sprintf("%s: the task was not taken: the queue of session %s is full (too many tasks wait their turn behind its running one): call %s again later, once some have run", RunTask, task.SessionID, RunTask)), nil
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		r := errorResult(fmt.Sprintf("run_task: %v", err))
		r.Meta = meta
		return r, nil
	}
	return taskAnswer(res), nil
}

// nullTaskID reports whether run_task's arguments (a JSON object that decoded)
// give task_id as null.
func nullTaskID(raw string) bool {
	var probe struct {
		TaskID json.RawMessage `json:"task_id"`
	}
	return json.Unmarshal([]byte(raw), &probe) == nil && string(probe.TaskID) == "null"
}

// admitter is a Node whose ingress admits a task without submitting it (*node.Node
// does): run_task learns from it the session and the ID of a named task
// (node.Task.TaskID) before it records its call. Without one, the call of a named
// task is not recorded (as over stdio).
type admitter interface {
	Ingress() *node.Ingress
}

var _ admitter = (*node.Node)(nil)

// disclosing is a Node whose agent has tools of its disclosure strategy
// (node.Node.DisclosureTools): the server does not offer them, as it offers
// every tool of the agent.
type disclosing interface {
	DisclosureTools() []string
}

var _ disclosing = (*node.Node)(nil)

// startCall records a run_task call of session id (rec: its request ID, stream
// and arguments' hash), and fills in the session of its task: a new one, or the
// one given. again reports a call the session made before with the same ID and
// arguments whose task the node has (a client that sends a cut call again): rec's
// TaskSession is that task's, and the call's stream is recorded as its.
func (s *Server) startCall(ctx context.Context, id string, rec *messages.MCPCallStarted) (again bool, err error) {
	st, err := s.book.state(ctx, id)
	if err != nil {
		return false, err
	}
	if c, ok := st.call(rec.RequestID, ""); ok && c.ArgsHash == rec.ArgsHash {
		rec.TaskSession, rec.TaskID = c.TaskSession, c.TaskID
		if _, again, err = s.callStatus(ctx, c.MCPCallStarted); err != nil {
			return false, err
		}
		if c.Stream == rec.Stream {
			return again, nil
		}
	} else {
		if rec.TaskSession == "" {
			rec.TaskSession = newTaskSession()
		}
		if rec.TaskID == "" {
			rec.TaskID = newTaskID()
		}
	}
	return again, s.book.record(ctx, id, func(*sessionState) (messages.Payload, error) { return rec, nil })
}

// callAgain answers a run_task call sent again with the result of the task the
// first one (rec) started, once it ends.
func (s *Server) callAgain(ctx context.Context, req *sdk.CallToolRequest, rec messages.MCPCallStarted) (*sdk.CallToolResult, error) {
	taskSession := rec.TaskSession
	defer s.closeOnStop(req)()
	f, ctx := s.follow(ctx, req.Session, req.Params, RunTask)
	res, err := s.awaitTask(ctx, func(ctx context.Context) (node.SessionStatus, bool, error) { return s.callStatus(ctx, rec) }, taskSession, true)
	f.end(ctx, err)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil && isClosed(s.closing):
		return nil, s.awaitCut(ctx, req.Session)
	case err != nil:
		r := errorResult(fmt.Sprintf("run_task: %v", err))
		r.Meta = sdk.Meta{SessionIDMeta: taskSession}
		return r, nil
	}
	res.SessionID = taskSession
	return taskAnswer(res), nil
}

// closeOnStop closes the stream of a run_task call when the node stops
// (CloseStreams), with the retry: its client resumes it from the node that serves
// next, which answers. Call the function it returns when the call ends.
func (s *Server) closeOnStop(req *sdk.CallToolRequest) (stop func() bool) {
	if req.Extra == nil || req.Extra.CloseSSEStream == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(s.closed, func() {
		req.Extra.CloseSSEStream(sdk.CloseSSEStreamArgs{RetryAfter: s.opts.ReconnectDelay})
	})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ServeStdio serves one client over the process's stdin and stdout until the client
// disconnects or ctx ends; a line that is no JSON-RPC message is answered with an
// error (LineTransport) and the session goes on.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.Serve(ctx, LineTransport(os.Stdin, os.Stdout, 0))
}

// Serve serves one client over t until it disconnects, shows no sign of life
// (answers no ping, sends no message, has no request open) for SessionTimeout,
// or ctx ends.
func (s *Server) Serve(ctx context.Context, t sdk.Transport) error {
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	l := &life{}
	s.lives.Store(ss, l)
	defer s.lives.Delete(ss)
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	// The pings stop when Serve returns, as ss has ended by then.
	pingCtx, stopPings := context.WithCancel(ctx)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		s.endUnanswered(pingCtx, ss, l)
	}()
	defer func() { stopPings(); <-pinged }()
	select {
	case <-ctx.Done():
		_ = ss.Close()
		<-ended
		return nil
	case err = <-ended:
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		// As the SDK's Run logs it: a client that went away is no error (warnOnly).
		sdkLogger(s.opts.Logger).Error(sdkEndedBadly, "error", err)
		return err
	}
	return nil
}

// life is what a session served by Serve showed of its client: how many
// requests and notifications it received, and how many of its requests are
// open (being answered).
type life struct {
	mu       sync.Mutex
	received uint64
	open     int
}

// recordLife is the receiving middleware that counts, for a session Serve
// serves, each request and notification of its client, and holds each request
// open while it is answered: endUnanswered takes either for a sign that the
// client is there, as an answered ping is.
// recoverPanics answers a request whose handling panicked with an internal
// error, logged with its stack, instead of letting the panic end the process:
// the SDK runs each request's handler on a goroutine of its own with no
// recover, so one bad request (a bug in a handler, a Node that panics) would
// take every session and task of the node with it.
func (s *Server) recoverPanics(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
		defer func() {
			if r := recover(); r != nil {
				s.opts.Logger.Error("mcp server: a request's handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("mcp server: %s failed: an internal error (the server logged it)", method)}
			}
		}()
		return next(ctx, method, req)
	}
}

func (s *Server) recordLife(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		v, ok := s.lives.Load(req.GetSession())
		if !ok {
			return next(ctx, method, req)
		}
		l := v.(*life)
		l.mu.Lock()
		l.received++
		l.open++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.open--
			l.mu.Unlock()
		}()
		return next(ctx, method, req)
	}
}

// alive says whether l's client sent a message since received was what it
// was, or has a request open, and returns the count of its messages now.
func (l *life) alive(received uint64) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.received != received || l.open > 0, l.received
}

// endUnanswered closes ss, a session over a transport of one client (stdio) whose
// signs of life recordLife counts in l, once its client has for SessionTimeout
// answered none of the pings, sent no request or notification, and had none of
// its requests open. A client that vanished
// closes the transport (stdin ends), so this catches a hung one only: a client
// that sends requests but answers no ping (some clients do not) keeps its session,
// and so does one whose call runs longer than SessionTimeout. It pings on its own,
// beside the SDK's keepalive, whose pings end no session (NewServer) and whose
// outcome it cannot see. It returns when ctx ends (Serve ends it once ss has).
func (s *Server) endUnanswered(ctx context.Context, ss *sdk.ServerSession, l *life) {
	interval := s.opts.SessionTimeout / sessionPings
	tick := time.NewTicker(interval)
	defer tick.Stop()
	missed := 0
	var received uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, done := context.WithTimeout(ctx, interval/2)
		err := ss.Ping(pctx, nil)
		done()
		var active bool
		active, received = l.alive(received)
		switch {
		case err == nil:
			missed = 0
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound}):
			return // a client that does not know pings, as the SDK's keepalive
		case active:
			missed = 0
			continue
		}
		if missed++; missed < sessionPings {
			continue
		}
		s.opts.Logger.Info("mcp server: a session ends: its client answered no ping, and sent no message, for the session timeout", "missed", missed, "err", err)
		_ = ss.Close()
		return
	}
}

// Handler serves MCP over Streamable HTTP (mount it at /mcp). Each client gets a
// session, which ends when the client has sent no request (an answer to a ping
// is one) for SessionTimeout and has none under way, nor a call's stream it
// resumed, or deletes it: the server keeps that timer, not the SDK's handler,
// and holds a session from the moment it takes a request in it
// (server_idle.go). A request in a
// session the server does not know (the node
// restarted, or a load balancer sent the request to another node) resumes it under
// the client's ID, at the protocol version of the request's MCP-Protocol-Version,
// rather than answer 404, which the official SDKs do not recover from; the
// session's log level, subscriptions and stream events are not carried over. A body
// that is not JSON (or nests arrays and objects deeper than encoding/json reads,
// said so) is answered with a JSON-RPC parse error (-32700), JSON that is
// neither an object nor an array of them with an invalid request (-32600), and
// so is a request that needs a session without an Mcp-Session-Id header (400,
// as the specification asks; needsSession). The
// events of its streams carry IDs
// and the last 10 MiB of them are kept in memory: a client whose connection drops
// while a call runs resumes the call's stream (Last-Event-ID) and gets its answer;
// they do not outlive the process. Cross-origin browser requests are
// refused, and so are requests to a loopback listener whose Host is not local (DNS
// rebinding). A body that is JSON but not UTF-8 is a parse error too, with the
// request's id: the SDK would read its bad bytes as U+FFFD. A request's write deadline is lifted: a run_task may take longer than
// the node's HTTP WriteTimeout, and a client's stream of notifications lasts (until
// CloseStreams). A request body larger than the bound set on r.Body (an
// http.MaxBytesReader: the node's route sets one) or than
// ServerOptions.MaxRequestBytes is answered 413 with a JSON-RPC error that says
// so, which an SDK shows its user: before the body is read, when its
// Content-Length says so, once the head of the body (which holds the request's
// id) came or headWait passed.
func (s *Server) Handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv },
		// No SessionTimeout: the server ends idle sessions itself (expire).
		&sdk.StreamableHTTPOptions{Logger: sdkLogger(s.opts.Logger), MaxRequestBodyBytes: -1,
			EventStore: liveEvents{eventStore: s.events, s: s}})
	protected := http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && isJSON(r.Header.Get("Content-Type")) {
			// The SDK answers a body that is not JSON-RPC in plain text.
			if code, msg, id := checkRPC(peekBody(r)); code != 0 {
				writeRPCErrorID(w, http.StatusBadRequest, code, msg, id)
				return
			}
			if r.Header.Get("Mcp-Session-Id") == "" {
				// As the specification asks: 400 to a request that needs a session.
				if msg, id, needs := needsSession(peekBody(r)); needs {
					writeRPCErrorID(w, http.StatusBadRequest, codeInvalidRequest, msg, id)
					return
				}
			}
		}
		if r.Method == http.MethodPost {
			rw := &rpcErrors{ResponseWriter: w}
			defer rw.finish(peekBody(r))
			w = rw
		}
		s.serveSessions(h, w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		// Who the request is signed in as reaches the tools' handlers in the
		// request's headers, the only part of it the SDK passes on; a client's
		// own header of that name names nobody.
		r.Header.Del(PrincipalHeader)
		if p := node.RequestPrincipal(r.Context()); p != "" {
			r.Header.Set(PrincipalHeader, p)
		}
		if r.Method == http.MethodPost && r.Body != nil {
			limit := cmp.Or(s.opts.MaxRequestBytes, MaxRequestBytes)
			if r.ContentLength > limit {
				// Refused before the body is read (but for its head, which holds the
				// request's id): the connection closes, or net/http would wait for up
				// to 256 KiB more of the body before it answered.
				w.Header().Set("Connection", "close")
				writeRPCErrorID(w, http.StatusRequestEntityTooLarge, codeInvalidRequest, fmt.Sprintf("the request is larger than %d bytes, the most this server takes", limit), readHeadID(w, r))
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
			var tooLarge *http.MaxBytesError
			switch {
			case errors.As(err, &tooLarge):
				writeRPCErrorID(w, http.StatusRequestEntityTooLarge, codeInvalidRequest, fmt.Sprintf("the request is larger than %d bytes, the most this server takes", tooLarge.Limit), headID(body))
				return
			case err != nil:
				// With the id of what came (the server's read deadline passed while
				// the body was on its way), which a client of it may still read. A
				// body that came too slowly is 408, as on the node's other routes,
				// said so rather than with the connection's addresses.
				status, why := http.StatusBadRequest, err.Error()
				var netErr net.Error
				if errors.As(err, &netErr) && netErr.Timeout() {
					status, why = http.StatusRequestTimeout, "it was not sent in time"
				}
				writeRPCErrorID(w, status, codeInvalidRequest, "the request body could not be read: "+why, headID(body))
				return
			}

			r.Body = io.NopCloser(bytes.NewReader(messages.TrimByteOrderMark(body)))
		}
		if r.Method == http.MethodGet && s.resumeLater(w, r) {
			return
		}
		if r.Method == http.MethodGet {
			// The server's stream of notifications ends at CloseStreams, so that an
			// HTTP server's Shutdown need not wait for the clients to hang up.
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			go func() {
				select {
				case <-s.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			r = r.WithContext(ctx)
		}
		rc := http.NewResponseController(w)
		var wr *streamWriter
		if id := r.Header.Get("Mcp-Session-Id"); id != "" && (r.Method == http.MethodPost || r.Method == http.MethodGet) {
			var release func()
			r, wr, release = s.claimStream(r, rc, id)
			defer release()
		}
		pw := unnamedPrime{w, strconv.FormatInt(s.opts.ReconnectDelay.Milliseconds(), 10), rc, s.opts.WriteTimeout, wr}
		// What net/http writes once the handler returns (the end of a chunked
		// body) gets a deadline too.
		defer pw.extend()
		var sw http.ResponseWriter = pw
		if r.Method == http.MethodGet {
			// A stream of notifications with nothing to notify would carry no
			// byte between the SDK's pings (SessionTimeout/sessionPings, a minute
			// by default): a proxy that cuts silent responses would end it.
			var stop func()
			sw, stop = ssekeepalive.Wrap(pw, StreamKeepAlive)
			defer stop()
		}
		protected.ServeHTTP(sw, r)
	})
}

// resumeLater answers a GET that resumes a stream (Last-Event-ID) once the server
// stops (CloseStreams), and reports whether it did: with the client's last event
// ID again and the retry, so that the client resumes the stream again, after the
// retry, from the node that serves next. A stream that ended with no event ID is
// the end of its call for the Go SDK ("request terminated without response"),
// and the SDK's own answer on a stopping server was such an empty stream: a
// client whose resumption came before the next node served lost the answer.
func (s *Server) resumeLater(w http.ResponseWriter, r *http.Request) bool {
	last := r.Header.Get("Last-Event-ID")
	if !isClosed(s.closing) || r.Header.Get("Mcp-Session-Id") == "" {
		return false
	}
	if _, _, ok := parseEventID(last); !ok {
		return false
	}
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "id: "+last+"\nretry: "+strconv.FormatInt(s.opts.ReconnectDelay.Milliseconds(), 10)+"\n\n")
	return true
}

// unnamedPrime passes the SDK's writes on, but for the names of the priming event
// that starts a stream ("event: prime") and of the event that closes one for the
// client to resume it ("event: close"): the spec's priming event is an ID and empty
// data, an unnamed ("message") event, which the SDKs skip as such; the Python SDK
// warns of an event named otherwise ("Unknown SSE event: prime") at every call.
// The priming event also gets the retry (milliseconds) that a client whose stream
// is cut waits before it resumes the stream (ServerOptions.ReconnectDelay), and so
// does the comment that starts the server's stream of notifications (GET).
//
// Each write and flush gets a write deadline of its own (ServerOptions.WriteTimeout),
// a write of more than writePiece bytes one for each piece, lifted once it is done.
type unnamedPrime struct {
	http.ResponseWriter
	retry   string
	rc      *http.ResponseController
	timeout time.Duration
	// wr is the request as a stream's writer (nil: it writes none): once a
	// resumption took its stream over, its writes fail at once.
	wr *streamWriter
}

func (w unnamedPrime) extend() { w.deadline(time.Now().Add(w.timeout)) }

// lift lifts the write deadline between writes: a stream idles as long as it
// likes (over HTTP/2 a deadline that passes resets the stream even between
// writes).
func (w unnamedPrime) lift() { w.deadline(time.Time{}) }

// deadline sets the write deadline to t, or to the past once the stream was
// taken over (checked after the deadline is set: a takeover sets its own after
// it marks the writer, so one of the two sees the other).
func (w unnamedPrime) deadline(t time.Time) {
	if w.wr.takenOver() {
		return
	}
	_ = w.rc.SetWriteDeadline(t)
	if w.wr.takenOver() {
		_ = w.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// write writes p a piece at a time, each under a deadline of its own.
func (w unnamedPrime) write(p []byte) (int, error) {
	if w.wr.takenOver() {
		return 0, errTakenOver
	}
	n := 0
	defer w.lift()
	for {
		piece := p[:min(len(p), writePiece)]
		w.extend()
		m, err := w.ResponseWriter.Write(piece)
		n += m
		if err != nil || len(piece) == len(p) {
			return n, err
		}
		p = p[len(piece):]
	}
}

var (
	primeName = []byte("event: prime\n")
	closeName = []byte("event: close\n")
	idField   = []byte("id: ")

	standaloneStart = []byte(": ok\n\n")
)

func (w unnamedPrime) Write(p []byte) (int, error) {
	switch {
	case bytes.HasPrefix(p, primeName):
		ev := p[len(primeName):]
		if bytes.HasPrefix(ev, idField) && !bytes.Contains(ev, []byte("\nretry: ")) {
			if i := bytes.IndexByte(ev, '\n'); i >= 0 {
				ev = slices.Concat(ev[:i+1], []byte("retry: "+w.retry+"\n"), ev[i+1:])
			}
		}
		_, err := w.write(ev)
		return len(p), err
	case bytes.HasPrefix(p, closeName):
		_, err := w.write(p[len(closeName):])
		return len(p), err
	case bytes.Equal(p, standaloneStart):
		// The server's stream of notifications (GET) starts with a comment and
		// no event: its retry goes with the comment, or a client whose stream is
		// cut (a restart) waits its own default, the Python SDK's 1 s, twice,
		// and then gets no notifications again.
		_, err := w.write([]byte(": ok\nretry: " + w.retry + "\n\n"))
		return len(p), err
	}
	return w.write(p)
}

func (w unnamedPrime) Flush() {
	w.extend()
	defer w.lift()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w unnamedPrime) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headBytes bounds what readHeadID reads of a body refused as too large.
const headBytes = 4 << 10

// headWait bounds how long readHeadID waits for the head of a body refused as too
// large: the refusal waits no longer for it.
const headWait = time.Second

// readHeadID reads the head of r's body, answered through w, and returns the
// request's id it holds (as headID does): it reads until the head holds the id
// and the method, or the message ended, or headBytes came, or headWait passed
// (nil, reading nothing, when the client waits to be told to send its body:
// Expect: 100-continue). A client sends the head of its body with its headers (the
// go-sdk's does in the same write), but what passes a reverse proxy, or HTTP/2,
// may bring the body's first bytes apart from the headers, and a few at a time:
// one read got the first piece alone, without the id. headWait is a read deadline
// of readHeadID's own: a client that sends its headers and no body waited for the
// server's read deadline, or for ever on an http.Server without a ReadTimeout
// (Handler mounted by a program of its own); it is answered with id null.
func readHeadID(w http.ResponseWriter, r *http.Request) json.RawMessage {
	if r.Header.Get("Expect") != "" {
		return nil
	}
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(headWait)
	if rc.SetReadDeadline(deadline) == nil {
		// A wrapper of the body may move the deadline at each read (the node's
		// paceBodies does): set again once it has passed, it ends a read that
		// still waits.
		again := time.AfterFunc(headWait, func() { _ = rc.SetReadDeadline(deadline) })
		defer func() {
			again.Stop()
			// The deadline before this one cannot be read back: none is left,
			// and nothing reads the body after its head (the connection closes
			// with the answer, Connection: close).
			_ = rc.SetReadDeadline(time.Time{})
		}()
	}
	head := make([]byte, headBytes)
	scan := newRequestIDScan()
	k := 0
	for k < len(head) {
		m, err := r.Body.Read(head[k:])
		scan.write(head[k : k+m])
		k += m
		if err != nil || scan.ended || scan.hasMethod && scan.result() != nil {
			break
		}
	}
	if !scan.hasMethod {
		return nil
	}
	return scan.result()
}

// headID returns the id of the request whose body starts with head (nil: none
// found, or none in head, or no "method" in head: a client's answer to the
// server's request has an id of the server's), a string or a number. A request
// refused before the SDK reads it is answered with it: the go-sdk's client fails
// that one call on a JSON-RPC error of its request's id, but takes any other
// refusal (id null) for a broken connection, after which each of its calls
// fails. The go-sdk's and the Python SDK's clients write the id and the method at
// the head of a request; the TypeScript SDK's, at its end.
func headID(head []byte) json.RawMessage {
	s := newRequestIDScan()
	s.write(head)
	if !s.hasMethod {
		return nil
	}
	return s.result()
}

// MaxRequestBytes bounds a request to Handler when nothing bounds it more.
const MaxRequestBytes = sdk.DefaultMaxRequestBodyBytes

// CloseStreams ends the server's streams of notifications to its clients over
// Streamable HTTP (GET requests to Handler), those open now and those that come
// after; an HTTP server calls it when it shuts down (http.Server.RegisterOnShutdown),
// whose Shutdown would otherwise wait for every connected client to hang up. The
// clients' sessions stay: a client that connects again goes on with its own.
func (s *Server) CloseStreams() {
	s.closingOnce.Do(func() {
		close(s.closing)
		s.closeCtx()
	})
}

// JSON-RPC's error codes of a request that never reached the SDK.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
)

// checkRPC returns the JSON-RPC error code, message and request ID (nil: unknown)
// of a request body that is not JSON or not UTF-8 (a parse error), or JSON but
// neither an object nor an array of them (an invalid request); 0 for one that is.
// The SDK checks the rest.
func checkRPC(body []byte) (code int, message string, id json.RawMessage) {
	if !json.Valid(body) {
		return codeParseError, notJSON("the request body", body), nil
	}
	if msg, id, bad := notUTF8("the request body", body); bad {
		return codeParseError, msg, id
	}
	var one map[string]json.RawMessage
	if json.Unmarshal(body, &one) == nil && one != nil {
		if msg, bad := badRequestID(one); bad {
			return codeInvalidRequest, msg, nil
		}
		if msg, bad := badProgressToken(one); bad {
			return codeInvalidParams, msg, one["id"]
		}
		return 0, "", nil
	}
	var batch []map[string]json.RawMessage
	if json.Unmarshal(body, &batch) == nil && len(batch) > 0 && !slices.ContainsFunc(batch, func(m map[string]json.RawMessage) bool { return m == nil }) {
		ids := map[string]bool{}
		for _, m := range batch {
			if msg, bad := badRequestID(m); bad {
				return codeInvalidRequest, "in a batch: " + msg, nil
			}
			if msg, bad := badProgressToken(m); bad {
				return codeInvalidParams, "in a batch: " + msg, nil
			}
			// As over stdio (lineState.check): the SDK runs one of two requests
			// of an id and drops the other without a word.
			var id bytes.Buffer
			if raw, ok := m["id"]; ok && json.Compact(&id, raw) == nil && id.String() != "null" {
				if ids[id.String()] {
					return codeInvalidRequest, "invalid request: the batch repeats the id " + id.String(), nil
				}
				ids[id.String()] = true
			}
		}
		return 0, "", nil
	}
	return codeInvalidRequest, "invalid request: the body is neither a JSON-RPC message (a JSON object) nor a batch of them", nil
}

// maxExactID is the largest magnitude of a request's integer id that the SDK
// answers as sent: it reads a number as a float64 and answers int64 of it.
const maxExactID = 1 << 53

// badRequestID returns the invalid-request error of a request (a message with a
// method) whose id is a number the SDK would not answer as sent: one with a
// fraction or an exponent (1.5 was answered as 1), or an integer past 2^53
// (2^53+1 as 2^53, 1e300 as -2^63). Its client would never match the answer to
// its request, after the request did its work. MCP's ids are strings or integers.
func badRequestID(m map[string]json.RawMessage) (message string, bad bool) {
	id, ok := m["id"]
	if _, request := m["method"]; !ok || !request {
		return "", false
	}
	id = bytes.TrimSpace(id)
	if !inexactNumber(id) {
		return "", false // a string, null, an integer it answers as sent; the SDK refuses other types
	}
	return fmt.Sprintf("invalid request: the id %.40s is not an integer from -2^53 to 2^53, which this server answers as sent: give a request a string or such an integer as its id", id), true
}

// inexactNumber reports whether v is a JSON number other than an integer from
// -2^53 to 2^53 (one with a fraction or an exponent, or an integer past 2^53):
// the SDK reads a number as a float64, and answers an id as an int64 of it.
func inexactNumber(v json.RawMessage) bool {
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return err != nil || n < -maxExactID || n > maxExactID
}

// codeInvalidParams is JSON-RPC's error code of a request whose params are wrong.
const codeInvalidParams = -32602

// badProgressToken returns the invalid-params error of a request whose
// progressToken (params._meta.progressToken) is an integer past 2^53, which the
// SDK reads as a float64 and sends back as another number, as badRequestID says
// of an id: 2^60+1 came back in each progress notification as
// 1152921504606847000, which its client matches to no request. A token with a
// fraction or an exponent comes back as the same number (1.5, 1e2 as 100): the
// float64 its client reads too.
//
// Only a request with an id (a string or a number) is checked: a notification is
// never answered (JSON-RPC), so it goes on to the SDK, which accepts it as any
// other; a request whose id is of another type is the SDK's to refuse, with id
// null, and its id is never echoed back.
func badProgressToken(m map[string]json.RawMessage) (message string, bad bool) {
	id := bytes.TrimSpace(m["id"])
	if _, request := m["method"]; !request || len(id) == 0 || id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
		return "", false
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(m["params"], &p) != nil {
		return "", false
	}
	tok := bytes.TrimSpace(p.Meta.ProgressToken)
	if bytes.ContainsAny(tok, ".eE") || !inexactNumber(tok) {
		return "", false
	}
	return fmt.Sprintf("invalid params: the progressToken %.40s is not an integer from -2^53 to 2^53, which this server sends back as sent: give a string or such an integer as the progressToken", tok), true
}

// maxJSONDepth is how deep encoding/json reads nested arrays and objects: past
// it, JSON is refused as not valid.
const maxJSONDepth = 10000

// notJSON is the parse error of a message (what names it) that json.Valid
// refused: JSON nested deeper than maxJSONDepth is said to be so, not "not JSON".
func notJSON(what string, msg []byte) string {
	if tooDeep(msg) {
		return fmt.Sprintf("parse error: %s nests arrays and objects more than %d deep, the most this server reads", what, maxJSONDepth)
	}
	return "parse error: " + what + " is not JSON"
}

// tooDeep reports whether msg opens more than maxJSONDepth arrays and objects
// (outside strings) before it closes them: a scan, not a parse.
func tooDeep(msg []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range msg {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// needsSession returns the invalid-request error, and the request's id, of a
// request over Streamable HTTP without an Mcp-Session-Id header that needs a
// session (a list, a call, a read, a get or a completion): the SDK would answer
// it with a JSON-RPC error of code 0 ("method … is invalid during session
// initialization"). Another method (initialize, which starts a session; ping; one
// the server does not know), a notification, a batch and a request of the
// sessionless protocol (a protocolVersion of 2026-07-28 or later in its _meta)
// are the SDK's to answer.
func needsSession(body []byte) (message string, id json.RawMessage, needs bool) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 || string(req.ID) == "null" || req.Method == "" {
		return "", nil, false
	}
	switch req.Method {
	case "tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read",
		"prompts/list", "prompts/get", "completion/complete":
	default:
		return "", nil, false // the SDK's: it answers an unknown method -32601
	}
	if v, ok := req.Params.Meta[sdk.MetaKeyProtocolVersion].(string); ok && v >= "2026-07-28" {
		return "", nil, false
	}
	return fmt.Sprintf("invalid request: %q needs a session, and the request has no Mcp-Session-Id header: send initialize first, "+
		"then this request with the Mcp-Session-Id header of its answer", req.Method), req.ID, true
}

// notUTF8 returns the parse error of a message (what names it: "the line") that is
// JSON but not UTF-8, which JSON must be, and the message's request ID when it has
// one: the SDK would take the bytes that are not UTF-8 for U+FFFD, and run a task
// or call a tool on an input that is not what its client sent (POST /v1/tasks and
// A2A refuse such a body too). bad is false for a message that is UTF-8.
func notUTF8(what string, msg []byte) (message string, id json.RawMessage, bad bool) {
	if utf8.Valid(msg) {
		return "", nil, false
	}
	var one struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &one) == nil && utf8.Valid(one.ID) && string(one.ID) != "null" {
		id = one.ID
	}
	return fmt.Sprintf("parse error: %s is not valid UTF-8 (byte %d): JSON is sent in UTF-8", what, messages.InvalidUTF8At(msg)), id, true
}

// rpcErrors passes a POST's answer on, but for the SDK's refusal of its body in
// plain text (400: a message of no JSON-RPC version 2.0, a method it does not
// know, a batch the protocol version has not), which it turns into a JSON-RPC
// error: method not found (-32601) or invalid request (-32600), with the
// request's id (null when it has none, or is of another JSON-RPC version).
type rpcErrors struct {
	http.ResponseWriter
	held bool // the SDK's answer is plain text, in msg
	msg  bytes.Buffer
}

func (w *rpcErrors) WriteHeader(status int) {
	if status == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.held = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *rpcErrors) Write(p []byte) (int, error) {
	if w.held {
		return w.msg.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

func (w *rpcErrors) Flush() {
	if !w.held {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *rpcErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the JSON-RPC error of a held answer to a request of body.
func (w *rpcErrors) finish(body []byte) {
	if !w.held {
		return
	}
	msg := strings.TrimSpace(w.msg.String())
	if strings.Contains(msg, "not handled") {
		var one struct{ ID json.RawMessage }
		_ = json.Unmarshal(body, &one)
		writeRPCErrorID(w.ResponseWriter, http.StatusBadRequest, codeMethodNotFound, "method not found: "+msg, one.ID)
		return
	}
	// With the request's id when it has one (a request whose params nest deeper
	// than the SDK decodes): the go-sdk's client fails its whole connection on an
	// error of id null.
	if !strings.HasPrefix(msg, "invalid request") { // the SDK's message may say so itself
		msg = "invalid request: " + msg
	}
	writeRPCErrorID(w.ResponseWriter, http.StatusBadRequest, codeInvalidRequest, msg, requestID(body))
}

// isJSON reports whether a Content-Type is JSON's (any other is the SDK's to refuse).
func isJSON(contentType string) bool {
	t, _, err := mime.ParseMediaType(contentType)
	return err == nil && t == "application/json"
}

// writeRPCError answers a request that never reached the SDK with a JSON-RPC error
// of code (its id is unknown: null), at status.
func writeRPCError(w http.ResponseWriter, status, code int, message string) {
	writeRPCErrorID(w, status, code, message, nil)
}

// writeRPCErrorID is writeRPCError with the request's id (nil: null).
func writeRPCErrorID(w http.ResponseWriter, status, code int, message string, id json.RawMessage) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	// The message may repeat what the request said (a method's name): the
	// browser must not sniff another type from it, as of every answer of the
	// node's API (the SDK's plain-text errors, which this one replaces, say so too).
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": message}})
}

// sdkLogger passes the SDK's warnings and errors to l; its info lines (a line per
// session and connection) are left out. Its keepalive's lines are not the
// warnings they say they are: a ping a client does not answer (a warning each
// over Streamable HTTP for a client without a stream of notifications, GET,
// which cannot answer any) is logged at debug level.
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(warnOnly{l.Handler()})
}

type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

// The messages of the SDK's keepalive (startKeepalive in its shared.go), and of
// the end of a session (Server.Connect). The keepalive never closes a session
// (NewServer): Serve and the HTTP handler's SessionTimeout do.
const (
	sdkPingMissed = "keepalive ping failed; tolerating below threshold"
	sdkEndedBadly = "server session ended with error"
)

func (h warnOnly) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case sdkPingMissed:
		r = relevel(r, slog.LevelDebug, "mcp server: a client answered no ping (one without a stream of notifications, GET, cannot)")
	case sdkEndedBadly:
		// A stdio client that went away (its end of the server's output closed)
		// is no error of the server's.
		gone := false
		r.Attrs(func(a slog.Attr) bool {
			err, ok := a.Value.Any().(error)
			gone = gone || ok && (errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe))
			return !gone
		})
		if gone {
			r = relevel(r, slog.LevelInfo, "mcp server: a session ends: its client went away")
		}
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// relevel returns r at level with message msg.
func relevel(r slog.Record, level slog.Level, msg string) slog.Record {
	out := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return out
}
func (h warnOnly) WithAttrs(a []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(a)} }
func (h warnOnly) WithGroup(g string) slog.Handler      { return warnOnly{h.Handler.WithGroup(g)} }
