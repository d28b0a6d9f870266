package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
)

// ErrServerUnavailable answers a call to a server that is down and did not come back
// within ClientConfig.CallWait.
var ErrServerUnavailable = errors.New("mcp server unavailable")

// Client connects a node to the MCP servers of its configuration and offers their
// tools, resources and prompts as tools (see the package documentation for their
// names). It is an actors.ToolCatalog: its tool set changes as servers connect and
// send list_changed notifications, and the node reads it at each model request.
//
// A server that is down (at start, or after its process died or its HTTP endpoint
// went away) is retried with backoff and reported by Status; its tools, once known,
// stay in the catalog while it is reconnecting, so that the tool section of the
// prompt does not change with every restart, and a call to one waits for the server
// (ClientConfig.CallWait) or fails with ErrServerUnavailable. No server, down or
// hostile, stops the node.
//
// Run connects and keeps the connections; Close ends them. Client is safe for
// concurrent use.
type Client struct {
	cfg     ClientConfig
	servers []*server // sorted by name

	// rebuilding serializes rebuild: one that read the servers' tools before a
	// server's new list must not replace the catalog built after it.
	rebuilding sync.Mutex

	mu      sync.Mutex
	specs   []messages.ToolSpec // the catalog now, sorted by name
	byName  map[string]tools.Tool
	changed chan struct{} // closed at the next change of the catalog
	tried   int           // servers that made their first attempt
	ready   chan struct{} // closed when every server made its first attempt
	running bool
	stop    context.CancelFunc
	done    chan struct{}
	updated []func(ctx context.Context, uri string) // OnUpdated's
}

var (
	_ actors.ToolCatalog = (*Client)(nil)
	_ tools.ChainCatalog = (*Client)(nil)
)

// NewClient checks cfg (ClientConfig.Validate) and returns a client of its servers;
// nothing connects until Run.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &Client{cfg: cfg, byName: map[string]tools.Tool{}, changed: make(chan struct{}), ready: make(chan struct{}), done: make(chan struct{})}
	for _, name := range slices.Sorted(maps.Keys(cfg.Servers)) {
		s := &server{c: c, name: name, source: "mcp:" + name, cfg: cfg.Servers[name],
			refresh: make(chan struct{}, 1), kick: make(chan struct{}, 1), up: make(chan struct{}), state: StateConnecting, since: time.Now()}
		if s.cfg.OAuth != nil {
			h, err := s.cfg.OAuth.oauthHandler(name, &http.Client{Timeout: 30 * time.Second}, cfg.Redactor)
			if err != nil {
				return nil, err
			}
			s.oauth = h
		}
		c.servers = append(c.servers, s)
	}
	if len(c.servers) == 0 {
		close(c.ready)
	}
	return c, nil
}

// Run connects to every server and keeps the connections until ctx ends or Close is
// called; then it closes them (a stdio server's stdin is closed, and the process is
// terminated if it does not exit) and returns nil. It may be called once.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running || c.stop != nil {
		c.mu.Unlock()
		return errors.New("mcp: Client.Run called twice, or after Close")
	}
	ctx, c.stop = context.WithCancel(ctx)
	c.running = true
	c.mu.Unlock()
	defer close(c.done)
	var wg sync.WaitGroup
	for _, s := range c.servers {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	return nil
}

// Close ends Run and waits for it to close the connections. It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	running := c.running
	if c.stop == nil {
		c.stop = func() {}
	}
	stop := c.stop
	c.mu.Unlock()
	stop()
	if running {
		<-c.done
	}
	return nil
}

// WaitReady returns when every server made its first attempt to connect (and, if it
// connected, listed its tools), or when ctx ends, with ctx's error.
func (c *Client) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Specs implements actors.ToolCatalog: the tools of every server, sorted by name.
func (c *Client) Specs() []messages.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.specs
}

// Tool implements actors.ToolCatalog.
func (c *Client) Tool(name string) (tools.Tool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byName[name]
	return t, ok
}

// Owns reports whether name is a name the catalog gives a tool of one of the
// configured servers, "<server>__<tool>", whether or not the server offers it now:
// a tool chain's step may call it (tools.ChainCatalog), looked up when it runs.
func (c *Client) Owns(name string) bool {
	srv, tool, ok := strings.Cut(name, Separator)
	if !ok || tool == "" {
		return false
	}
	return slices.ContainsFunc(c.servers, func(s *server) bool { return s.name == srv })
}

// Tools returns the catalog's tools now, sorted by name. Each has a Source method
// returning "mcp:<server>".
func (c *Client) Tools() []tools.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]tools.Tool, len(c.specs))
	for i, s := range c.specs {
		out[i] = c.byName[s.Name]
	}
	return out
}

// Changed returns a channel closed at the next change of the catalog (a server's
// tools, resources or prompts were listed anew and differ). Call it again after each
// change.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// The states of a server (ServerStatus.State).
const (
	// StateConnecting: the first attempt to connect has not ended.
	StateConnecting = "connecting"
	// StateConnected: the server answered and its tools are listed.
	StateConnected = "connected"
	// StateDown: the last attempt failed, or the connection was lost; it is retried.
	StateDown = "down"
)

// ServerStatus is what Status reports of one server.
type ServerStatus struct {
	Name string `json:"name"`
	// Transport is "stdio", "http" or "in-process" (ServerConfig.Transport).
	Transport string `json:"transport"`
	// State is StateConnecting, StateConnected or StateDown, since Since.
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Error is why the server is down.
	Error string `json:"error,omitempty"`
	// Connects counts the connections made so far (more than 1: it reconnected).
	Connects int `json:"connects"`
	// Server is the server's name and version, as it said when it connected.
	Server string `json:"server,omitempty"`
	// Tools are the names of its tools in the catalog.
	Tools []string `json:"tools"`
	// Skipped says which of its tools were left out, and why (a schema that is not
	// a JSON Schema object, a name clash, too many tools).
	Skipped []string `json:"skipped,omitempty"`
}

// Status reports every server, sorted by name.
func (c *Client) Status() []ServerStatus {
	out := make([]ServerStatus, 0, len(c.servers))
	for _, s := range c.servers {
		out = append(out, s.status())
	}
	return out
}

// rebuild makes the catalog anew from the servers' tools, and signals a change when
// it differs or when offerChanged (a server's resources or prompts changed).
func (c *Client) rebuild(offerChanged bool) {
	c.rebuilding.Lock()
	defer c.rebuilding.Unlock()
	var all []tools.Tool
	for _, s := range c.servers {
		s.mu.Lock()
		all = append(all, s.tools...)
		s.mu.Unlock()
	}
	specs := make([]messages.ToolSpec, len(all))
	byName := make(map[string]tools.Tool, len(all))
	for i, t := range all {
		specs[i] = t.Spec()
		byName[specs[i].Name] = t
	}
	slices.SortFunc(specs, func(a, b messages.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	c.mu.Lock()
	defer c.mu.Unlock()
	if sameSpecs(c.specs, specs) && !offerChanged {
		c.byName = byName
		return
	}
	c.specs, c.byName = specs, byName
	close(c.changed)
	c.changed = make(chan struct{})
}

func sameSpecs(a, b []messages.ToolSpec) bool {
	return slices.EqualFunc(a, b, func(x, y messages.ToolSpec) bool {
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.Parameters, y.Parameters)
	})
}

// triedOnce counts a server's first attempt.
func (c *Client) triedOnce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tried++
	if c.tried == len(c.servers) {
		close(c.ready)
	}
}

// server is one configured server and its connection.
type server struct {
	c      *Client
	name   string
	source string // its tools' Source: "mcp:<name>"
	cfg    ServerConfig
	// oauth authorizes the connections to a "url" server with OAuth (nil: none);
	// it keeps its tokens across them.
	oauth auth.OAuthHandler
	// refresh asks the connection's loop to list the server's offer again
	// (list_changed); kick asks it to drop the connection and reconnect at once.
	refresh, kick chan struct{}
	// sent holds the idempotency keys of the tool calls written to a stdio server's
	// stdin whole (stdioConn.Write), so that a call whose connection broke after it
	// went out is not sent again unless its tool says it may be (remoteTool.Call).
	sent sentKeys
	// taskOnly are its tools that it runs only as tasks, noted from its answers
	// to tools/list: they are left out of the catalog (build).
	taskOnly taskOnlyTools

	mu       sync.Mutex
	cs       *sdk.ClientSession // nil while down
	up       chan struct{}      // closed while cs is set
	state    string
	since    time.Time
	err      error
	connects int
	info     string
	tools    []tools.Tool
	skipped  []string
	offer    remoteOffer // its resources, templates and prompts, for a Server (proxy.go)
	stderr   *lineLogger // a stdio server's stderr, of its last connection
	// noticed counts the list_changed notifications of the server (askRefresh),
	// listedUpTo how many of them the last listing to end covers (the count when
	// it began), and listed closes when listedUpTo grows (awaitListing).
	noticed, listedUpTo uint64
	listed              chan struct{}
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{Name: s.name, Transport: "http", State: s.state, Since: s.since, Connects: s.connects, Server: s.info,
		Tools: make([]string, len(s.tools)), Skipped: slices.Clone(s.skipped)}
	if s.cfg.Stdio() {
		st.Transport = "stdio"
	} else if s.cfg.Transport != nil {
		st.Transport = "in-process"
	}
	if s.err != nil && s.state != StateConnected {
		st.Error = s.err.Error()
	}
	for i, t := range s.tools {
		st.Tools[i] = t.Spec().Name
	}
	return st
}

// run keeps the server connected until ctx ends.
func (s *server) run(ctx context.Context) {
	log := s.c.cfg.Logger.With("mcp_server", s.name)
	backoff := s.c.cfg.MinBackoff
	first := true
	for ctx.Err() == nil {
		cs, err := s.connect(ctx)
		if first {
			if err != nil {
				// Down, with why, before the first attempt counts: a caller
				// of WaitReady reads it in Status (it read "connecting" with
				// no error, the attempt's failure not yet set).
				s.setDown(err)
			}
			s.c.triedOnce()
			first = false
		}
		if err == nil {
			began := time.Now()
			log.Info("mcp server connected", "server", s.status().Server, "tools", len(s.status().Tools))
			err = s.serve(ctx, cs)
			if time.Since(began) >= time.Minute {
				backoff = s.c.cfg.MinBackoff
			}
		}
		if ctx.Err() != nil {
			s.setDown(ctx.Err())
			return
		}
		s.setDown(err)
		log.Warn("mcp server is down; retrying", "err", withoutURLCredentials(err), "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		case <-s.kick:
		}
		backoff = min(2*backoff, s.c.cfg.MaxBackoff)
	}
}

// connect starts or reaches the server, initializes a session and lists what it
// offers, within ConnectTimeout.
func (s *server) connect(ctx context.Context) (*sdk.ClientSession, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, s.c.cfg.ConnectTimeout,
		fmt.Errorf("the server did not connect and list its tools within %s", s.c.cfg.ConnectTimeout))
	defer cancel()
	// A stdio or HTTP connection counts a list_changed as it reads it
	// (stdioConn.Read, boundedEvents), before the answer after it; the SDK's
	// handler of the same notification, run apart from the answers, counts it
	// only on a Transport of the configuration's: counted twice, it was listed
	// twice, and a call that saw both counts waited for the second listing,
	// RelistInterval after the first.
	askRefresh := s.askRefresh
	if s.cfg.Transport == nil {
		askRefresh = func() {}
	}
	opts := &sdk.ClientOptions{
		Capabilities:               &sdk.ClientCapabilities{},
		ToolListChangedHandler:     func(context.Context, *sdk.ToolListChangedRequest) { askRefresh() },
		PromptListChangedHandler:   func(context.Context, *sdk.PromptListChangedRequest) { askRefresh() },
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) { askRefresh() },
		ResourceUpdatedHandler: func(ctx context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			if req.Params != nil {
				s.c.tellUpdated(ctx, req.Params.URI)
			}
		},
		Logger:                    slog.New(slog.DiscardHandler),
		KeepAlive:                 s.c.cfg.PingInterval,
		KeepAliveFailureThreshold: 2,
	}
	if s.cfg.Elicitation == ElicitDefaults {
		opts.ElicitationHandler = elicitDefaults
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "troupe", Version: version()}, opts)
	cs, err := client.Connect(cctx, s.transport(), nil)
	if err != nil {
		if cause := context.Cause(cctx); cause != nil && cctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		return nil, s.withStderr(fmt.Errorf("connect: %w", err))
	}
	if err := s.list(cctx, cs); err != nil {
		_ = cs.Close()
		if cause := context.Cause(cctx); cause != nil && cctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		return nil, s.withStderr(err)
	}
	s.mu.Lock()
	s.cs, s.state, s.since, s.err = cs, StateConnected, time.Now(), nil
	s.connects++
	if r := cs.InitializeResult(); r != nil && r.ServerInfo != nil {
		s.info = strings.TrimSpace(r.ServerInfo.Name + " " + r.ServerInfo.Version)
	}
	close(s.up)
	s.mu.Unlock()
	return cs, nil
}

// serve waits for the session to end, listing the server's offer again when it says
// it changed. It returns why the session ended.
func (s *server) serve(ctx context.Context, cs *sdk.ClientSession) error {
	// The calls waiting for a listing wait no more once the connection ended.
	defer func() { s.listedTo(s.noticedCount()) }()
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	// A list_changed within RelistInterval of the last listing's start waits
	// for its end (due), and those that come meanwhile join it.
	listed := time.Now() // connect listed the offer
	var due <-chan time.Time
	relist := func() {
		listed = time.Now()
		lctx, cancel := context.WithTimeout(ctx, s.c.cfg.ConnectTimeout)
		err := s.list(lctx, cs)
		cancel()
		// A listing cut by the client's close is no failure of the server's.
		if err != nil && ctx.Err() == nil {
			s.c.cfg.Logger.Warn("mcp server: listing its tools again failed; keeping the last list", "mcp_server", s.name, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			_ = cs.Close()
			<-ended
			return ctx.Err()
		case err := <-ended:
			_ = cs.Close() // reaps a stdio server's process
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return s.withStderr(fmt.Errorf("connection lost: %w", err))
		case <-s.kick:
			_ = cs.Close()
			<-ended
			return errors.New("connection lost: a call found it broken")
		case <-s.refresh:
			if due != nil {
				continue // a listing is due already
			}
			if wait := s.c.cfg.RelistInterval - time.Since(listed); wait > 0 {
				due = time.After(wait)
				continue
			}
			relist()
		case <-due:
			due = nil
			relist()
		}
	}
}

// listChangedMethods are the notifications after which the server's offer is
// listed again.
var listChangedMethods = map[string]bool{
	"notifications/tools/list_changed":     true,
	"notifications/prompts/list_changed":   true,
	"notifications/resources/list_changed": true,
}

// notified is the method of the JSON-RPC notification msg ("": msg is none).
func notified(msg []byte) string {
	var n struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(msg, &n) != nil || n.ID != nil {
		return ""
	}
	return n.Method
}

// askRefresh counts a list_changed of the server and asks its connection's loop
// to list its offer again.
func (s *server) askRefresh() {
	s.mu.Lock()
	s.noticed++
	s.mu.Unlock()
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

// noticedCount returns how many list_changed notifications the server sent.
func (s *server) noticedCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noticed
}

// listedTo records that a listing (or a connection) ended that covers the first
// n notifications, waking the calls that wait for them (awaitListing).
func (s *server) listedTo(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.listedUpTo {
		s.listedUpTo = n
		if s.listed != nil {
			close(s.listed)
			s.listed = nil
		}
	}
}

// awaitListing waits, when the server sent a list_changed since the count
// before (a call that changed the server's tools says so before it answers), until
// a listing that covers it has ended, so that the call's result reaches the agent
// with the new list in the catalog; at most the listing's own bound (RelistInterval,
// then ConnectTimeout), or until ctx ends or the connection does.
func (s *server) awaitListing(ctx context.Context, before uint64) {
	bound := time.NewTimer(s.c.cfg.RelistInterval + s.c.cfg.ConnectTimeout)
	defer bound.Stop()
	s.mu.Lock()
	target := s.noticed
	s.mu.Unlock()
	if target <= before {
		return
	}
	for {
		s.mu.Lock()
		if s.listedUpTo >= target {
			s.mu.Unlock()
			return
		}
		if s.listed == nil {
			s.listed = make(chan struct{})
		}
		listed := s.listed
		s.mu.Unlock()
		select {
		case <-listed:
		case <-ctx.Done():
			return
		case <-bound.C:
			return
		}
	}
}

// setDown marks the server down with err; its tools stay in the catalog.
func (s *server) setDown(err error) {
	err = withoutURLCredentials(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		s.up = make(chan struct{})
		s.cs = nil
	}
	s.state, s.since, s.err = StateDown, time.Now(), err
}

// withoutURLCredentials returns err with the credentials of the URLs its text
// names hidden, whatever their length (redact.URLs): Go's HTTP client names a
// server's URL in its errors with its query whole ("Post \"https://host/mcp?api_key=...\":
// dial tcp ..."), and the error is served (Status, GET /v1/mcp/servers), logged
// and given to the model (a call of a server that is down), while the node's
// redactor replaces only the secrets of at least redact.MinSecretLen bytes.
func withoutURLCredentials(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if hidden := redact.URLs(msg); hidden != msg {
		return &hiddenError{err: err, msg: hidden}
	}
	return err
}

// hiddenError is err, said as msg: its text with secrets hidden.
type hiddenError struct {
	err error
	msg string
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }

// broken drops cs if it is still the server's session (a call found its connection
// broken) and asks for a reconnection at once.
func (s *server) broken(cs *sdk.ClientSession) {
	s.mu.Lock()
	current := s.cs == cs
	if current {
		s.up = make(chan struct{})
		s.cs = nil
	}
	s.mu.Unlock()
	if current {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// session returns the server's session, waiting up to CallWait (and ctx) for a
// server that is connecting or reconnecting.
func (s *server) session(ctx context.Context) (*sdk.ClientSession, error) {
	s.mu.Lock()
	cs, up := s.cs, s.up
	s.mu.Unlock()
	if cs != nil {
		return cs, nil
	}
	wait := time.NewTimer(s.c.cfg.CallWait)
	defer wait.Stop()
	select {
	case <-up:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-wait.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		return s.cs, nil
	}
	why := "it has not connected yet"
	if s.err != nil {
		why = s.err.Error()
	}
	return nil, fmt.Errorf("%w: %q is %s since %s (%s); it is being retried", ErrServerUnavailable, s.name, s.state, s.since.Format(time.RFC3339), why)
}

// do runs f on the server's session. When the connection turns out broken (a stdio
// server's process died, an HTTP server forgot the session after a restart), it
// reconnects and runs f once more: the request did not reach a live session, and
// a tool call carries the same idempotency key both times.
func (s *server) do(ctx context.Context, f func(*sdk.ClientSession) error) error {
	return s.doOnce(ctx, f, nil)
}

// doOnce is do, but when the connection broke it asks sent (unless nil) first,
// and when sent says the request went out, returns the error wrapped in
// ErrOutcomeUnknown instead of running f again.
func (s *server) doOnce(ctx context.Context, f func(*sdk.ClientSession) error, sent func() bool) error {
	cs, err := s.session(ctx)
	if err != nil {
		return err
	}
	err = f(cs)
	if err == nil || ctx.Err() != nil {
		return err
	}
	var answered *jsonrpc.Error
	if errors.As(err, &answered) || !isBroken(err) && s.alive(ctx, cs) {
		return err // the server answered with an error, or is there to answer
	}
	s.broken(cs)
	if sent != nil && sent() {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	cs2, err2 := s.session(ctx)
	if err2 != nil {
		return fmt.Errorf("%w; reconnecting: %w", err, err2)
	}
	return f(cs2)
}

// isBroken reports an error that means the session's connection is gone.
func isBroken(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EPIPE)
}

// alive pings the server on cs after a request failed without an answer: an HTTP
// server that restarted answers 400 or 404 to a session it does not know, which the
// transport does not always take for the session's end.
func (s *server) alive(ctx context.Context, cs *sdk.ClientSession) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return cs.Ping(pctx, nil) == nil
}

// transport is the server's transport, new for each connection.
func (s *server) transport() sdk.Transport {
	if s.cfg.Transport != nil {
		return s.cfg.Transport()
	}
	if s.cfg.Stdio() {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Dir
		cmd.Env = s.cfg.Environ(os.Environ())
		stderr := &lineLogger{log: s.c.cfg.Logger.With("mcp_server", s.name)}
		s.mu.Lock()
		s.stderr = stderr
		s.mu.Unlock()
		cmd.Stderr = stderr
		// A child of the server that holds its stderr does not keep the server's
		// end waiting on it once the server exited.
		cmd.WaitDelay = time.Second
		ownGroup(cmd)
		return &stdioTransport{cmd: cmd, terminate: 2 * time.Second, log: s.c.cfg.Logger.With("mcp_server", s.name), sent: &s.sent, taskOnly: &s.taskOnly,
			listChanged: s.askRefresh}
	}
	var rt http.RoundTripper = boundedBodies{base: http.DefaultTransport, taskOnly: &s.taskOnly, listChanged: s.askRefresh}
	if len(s.cfg.Headers) > 0 {
		u, _ := url.Parse(s.cfg.URL) // valid (Validate)
		rt = headerTransport{base: rt, headers: s.cfg.Headers, scheme: u.Scheme, host: u.Host}
	}
	// MaxEventSize is set: the SDK documents 0 as its default bound, and reads
	// events without one (boundedBodies bounds them first).
	return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &http.Client{Transport: rt}, OAuthHandler: s.oauth,
		MaxEventSize: sdk.DefaultMaxEventSize}
}

// stuckWriteGrace is how long a write to a stdio server may go on after its
// context ended before the connection is closed under it.
const stuckWriteGrace = time.Second

// ErrServerNotReading fails a message that a stdio server did not read (its stdin
// stayed full) before the request's context ended: the connection is closed.
var ErrServerNotReading = errors.New("the server is not reading its stdin: the message could not be written before the request ended; the connection is closed")

type stdioConn struct {
	sdk.Connection
	cmd  *exec.Cmd
	sent *sentKeys // the keys of the tool calls written whole; nil: none kept
	// taskOnly notes the task-only tools of the answers to tools/list (nil: none).
	taskOnly *taskOnlyTools
	// listChanged is called with each list_changed notification read (nil: not
	// called): here, before the answer that follows it is read, where the SDK's
	// handler of the notification runs apart from the answers.
	listChanged func()
	once        sync.Once
	err         error
	aborted     atomic.Bool
}

// Write writes msg, and closes the connection when the write is still blocked
// stuckWriteGrace after ctx ended: a server that stopped reading its stdin (hung,
// yet alive) would keep it blocked for ever once the pipe is full, and with it
// every write after it (the next calls, the keepalive's pings, the SDK's Close,
// which waits for the calls in flight), past every timeout.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	var mu sync.Mutex
	var finished bool
	var abort *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			abort = time.AfterFunc(stuckWriteGrace, func() {
				c.aborted.Store(true)
				_ = c.Close()
			})
		}
	})
	err := c.Connection.Write(ctx, msg)
	if !stop() {
		mu.Lock()
		finished = true
		if abort != nil {
			abort.Stop()
		}
		mu.Unlock()
	}
	if err != nil && c.aborted.Load() {
		return fmt.Errorf("%w (%v)", ErrServerNotReading, err)
	}
	if err == nil && c.sent != nil {
		if key, ok := ctx.Value(callKeyCtx{}).(string); ok {
			if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
				c.sent.add(key)
			}
		}
	}
	return err
}

// Read reads the next message, noting the task-only tools of a tools/list's
// answer and the list_changed notifications.
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && c.listChanged != nil && listChangedMethods[req.Method] {
		c.listChanged()
	}
	if resp, ok := msg.(*jsonrpc.Response); ok && c.taskOnly != nil && len(resp.Result) > 0 &&
		bytes.Contains(resp.Result, []byte(`"tools"`)) {
		c.taskOnly.note(resp.Result)
	}
	return msg, err
}

// callKeyCtx is the context key of a tool call's idempotency key
// (remoteTool.Call), which stdioConn.Write notes once the call went out whole,
// without decoding the request's params again.
type callKeyCtx struct{}

// ErrOutcomeUnknown fails a tool call whose server's connection broke after the
// call was written to it (a stdio server that died mid-call): the server may have
// performed it, so it is not sent again, unless its tool is marked idempotent or
// read-only (the MCP annotations idempotentHint, readOnlyHint).
var ErrOutcomeUnknown = errors.New("the connection to the server broke after the call was sent: it may have been performed, and it is not sent again (its tool is not marked idempotentHint or readOnlyHint)")

// sentKeys is a set of tool calls' idempotency keys.
type sentKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func (k *sentKeys) add(key string) {
	if key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]struct{}{}
	}
	k.keys[key] = struct{}{}
}

// take says whether key is in the set, and removes it.
func (k *sentKeys) take(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[key]
	delete(k.keys, key)
	return ok
}

// Close closes the connection (the server is asked to exit, then made to), then
// kills the rest of its group, once. A server that stopped reading its stdin
// (aborted) is killed first: it would not hear the request to exit, and the SDK
// waits seconds for it before it makes it, keeping the server down meanwhile.
func (c *stdioConn) Close() error {
	c.once.Do(func() {
		if c.aborted.Load() {
			stopGroup(c.cmd)
		}
		c.err = c.Connection.Close()
		stopGroup(c.cmd)
	})
	return c.err
}

// headerTransport adds the configured headers to every request to the server's
// own scheme and host: a redirect to another host (which the HTTP client follows)
// gets none of them, for they are the server's secrets (an API key, a token).
type headerTransport struct {
	base         http.RoundTripper
	headers      map[string]string
	scheme, host string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.EqualFold(r.URL.Scheme, t.scheme) || !strings.EqualFold(r.URL.Host, t.host) {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// maxResponseBytes bounds the body of one HTTP response of a server that is not an
// event stream (a JSON answer, an error page), and one event of a stream: the SDK
// reads such a body or event whole, so a server that sends an endless one would
// otherwise fill the node's memory. It is the SDK's own bound of one message over
// stdio.
const maxResponseBytes = sdk.DefaultMaxLineLength

// ErrResponseTooLarge fails a request to a server whose answer (a body that is not
// an event stream) is larger than the node reads of one, when it is not the answer
// to a request of the node's (boundedBodies answers those with an error response).
var ErrResponseTooLarge = fmt.Errorf("the server's answer is larger than %d bytes, the most the node reads of one message", maxResponseBytes)

// boundedBodies bounds what the node reads of a server's answer at
// maxResponseBytes. An answer to a request (a JSON body, or an event of the
// request's stream) that is larger is replaced by an error response to the
// request's id, which fails that call alone: the SDK took it for a broken
// connection, and the call was sent again to the server, which performed it a
// second time; and it read an event of a stream with no bound at all. Another body
// fails its reading with ErrResponseTooLarge past the bound; another event (on the
// stream of no request) is dropped.
type boundedBodies struct {
	base http.RoundTripper
	// taskOnly, when set, notes the task-only tools of the answers to tools/list.
	taskOnly *taskOnlyTools
	// listChanged, when set, is called with each list_changed notification of a
	// stream as its event is read, before the events after it (a call's answer
	// after it on the call's stream) are handed on.
	listChanged func()
}

func (t boundedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	id, method := postedRequest(r)
	var taskOnly *taskOnlyTools
	if method == "tools/list" {
		taskOnly = t.taskOnly
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == "text/event-stream":
		resp.Body = &boundedEvents{body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), id: id, lineStart: true, taskOnly: taskOnly,
			listChanged: t.listChanged}
	case id != nil && resp.StatusCode/100 == 2:
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
		_ = resp.Body.Close()
		if len(data) > maxResponseBytes {
			data, err = tooLarge(id), nil
			resp.ContentLength = int64(len(data))
			resp.Header.Del("Content-Length")
		} else if taskOnly != nil {
			taskOnly.noteMessage(data)
		}
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), errReader{err}))
	default:
		resp.Body = &boundedBody{body: resp.Body, left: maxResponseBytes}
	}
	return resp, nil
}

// postedRequest is the JSON-RPC id and method of the request r posts (nil: r posts
// no request).
func postedRequest(r *http.Request) (json.RawMessage, string) {
	if r.Method != http.MethodPost || r.GetBody == nil {
		return nil, ""
	}
	body, err := r.GetBody()
	if err != nil {
		return nil, ""
	}
	defer body.Close()
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(body).Decode(&req) != nil || req.Method == "" || len(req.ID) == 0 || string(req.ID) == "null" {
		return nil, ""
	}
	return req.ID, req.Method
}

// tooLarge is the error response to the request id whose answer is too large.
func tooLarge(id json.RawMessage) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": -32603, "message": ErrResponseTooLarge.Error()}})
	return b
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// boundedEvents hands on the events of a stream whole, each at most
// maxResponseBytes: a larger one (or one that does not end) is replaced by an
// error response to the stream's request, or dropped on a stream of no request.
type boundedEvents struct {
	body      io.ReadCloser
	r         *bufio.Reader
	id        json.RawMessage // the stream's request's
	ev        []byte          // the event so far
	over      bool            // the event is over the bound: its rest is skipped
	lineStart bool
	out       []byte
	err       error
	taskOnly  *taskOnlyTools // notes the events of a tools/list's stream (nil: none)
	// listChanged is called with each list_changed notification (nil: not called).
	listChanged func()
}

func (b *boundedEvents) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		chunk, err := b.r.ReadSlice('\n')
		b.take(chunk, err == nil)
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			// An event cut short goes on as it is: the SDK's reader says what
			// is wrong.
			b.err, b.out, b.ev = err, append(b.out, b.ev...), nil
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// take adds a piece of a line to the event, complete when it ends the line; a
// blank line ends the event.
func (b *boundedEvents) take(chunk []byte, complete bool) {
	blank := b.lineStart && complete && (len(chunk) == 1 || len(chunk) == 2 && chunk[0] == '\r')
	b.lineStart = complete
	if b.over {
		b.over = !blank
		return
	}
	if len(b.ev)+len(chunk) > maxResponseBytes {
		b.ev, b.over = nil, !blank
		if b.id != nil {
			b.out = append(append([]byte("event: message\ndata: "), tooLarge(b.id)...), "\n\n"...)
		}
		return
	}
	b.ev = append(b.ev, chunk...)
	if blank {
		if b.taskOnly != nil {
			b.taskOnly.noteEvent(b.ev)
		}
		if b.listChanged != nil && bytes.Contains(b.ev, []byte("list_changed")) && listChangedMethods[notified(eventData(b.ev))] {
			b.listChanged()
		}
		b.out, b.ev = b.ev, nil
	}
}

func (b *boundedEvents) Close() error { return b.body.Close() }

type boundedBody struct {
	body io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more says whether the body ends here.
		var one [1]byte
		if n, err := b.body.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.body.Close() }

// lineLogger logs what a stdio server writes to its stderr, a line at a time (each
// cut at 1 KiB), at debug level, and keeps its last lines: a server that fails
// (at start: a module missing, a bad flag; or later: a crash) says why there, and
// the error that marks it down gives them (Tail).
type lineLogger struct {
	log *slog.Logger

	mu   sync.Mutex
	buf  []byte
	tail []string // the last stderrTailLines lines
}

const (
	maxLogLine      = 1 << 10
	stderrTailLines = 5
	stderrTailLine  = 300 // bytes of each line in Tail
)

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := max(0, maxLogLine-len(l.buf))
			l.buf = append(l.buf, p[:min(room, len(p))]...)
			break
		}
		room := max(0, maxLogLine-len(l.buf))
		l.buf = append(l.buf, p[:min(room, i)]...)
		if line := strings.TrimSpace(string(l.buf)); line != "" {
			l.log.Debug("mcp server stderr", "line", line)
			l.tail = append(l.tail, line)
			if len(l.tail) > stderrTailLines {
				l.tail = slices.Delete(l.tail, 0, 1)
			}
		}
		l.buf = l.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Tail returns the last lines the server wrote on its stderr (each cut at 300
// bytes), joined by " | ", or "".
func (l *lineLogger) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := slices.Clone(l.tail)
	if line := strings.TrimSpace(string(l.buf)); line != "" {
		lines = append(lines, line)
		if len(lines) > stderrTailLines {
			lines = lines[1:]
		}
	}
	for i, line := range lines {
		if len(line) > stderrTailLine {
			lines[i] = cutUTF8(line, stderrTailLine) + "…"
		}
	}
	return strings.Join(lines, " | ")
}

// withStderr adds to err, why a stdio server's connection failed or was lost, the
// last lines the server wrote on its stderr.
func (s *server) withStderr(err error) error {
	s.mu.Lock()
	l := s.stderr
	s.mu.Unlock()
	if err == nil || l == nil {
		return err
	}
	if tail := l.Tail(); tail != "" {
		return fmt.Errorf("%w; the server's stderr ended with: %s", err, tail)
	}
	return err
}

// version is the node binary's module version, for the client's and the server's
// implementation info.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
