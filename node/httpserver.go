package node

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// defaultWriteTimeout is HTTPConfig.WriteTimeout's default.
const defaultWriteTimeout = 30 * time.Second

// HTTPConfig bounds the node's HTTP server (Node.HTTPServer). Zero fields take the
// defaults.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout is how long a request, body included, may take at any rate
	// (default 30 s). Past it a body keeps arriving as long as it comes at
	// MinBodyRate on average since the request began, up to MaxBodyTime; a body
	// that falls behind has its read cut and is answered 408.
	//
	// The rule is a minimum average rate with a grace period, rather than a
	// fixed bound on the whole body or a bound on each gap between reads: a
	// fixed bound refuses a large healthy upload over a modest link (a 32 MiB
	// document in 30 s needs 1.1 MB/s), and a gap bound alone lets a slowloris
	// that sends a byte just inside each gap hold its connection for
	// MaxBodyTime. With the average, every byte buys 1/MinBodyRate seconds: a
	// trickle is cut at about ReadTimeout, as before, while a 32 MiB document
	// at 64 KiB/s takes its 512 s. A client that got ahead may pause on its
	// credit, never past MaxBodyTime.
	ReadTimeout time.Duration
	// MinBodyRate is the least average rate, in bytes a second, at which a body
	// read past ReadTimeout must keep arriving (default DefaultMinBodyRate).
	MinBodyRate int64
	// MaxBodyTime bounds reading a request, body included, whatever its rate
	// (default 10 minutes; at least ReadTimeout).
	MaxBodyTime time.Duration
	// WriteTimeout bounds writing a response (default 30 s). A live stream (SSE)
	// extends it before each write, so it bounds each write, not the stream.
	WriteTimeout time.Duration
	// answerWait replaces, when set (tests), the 10 minutes an answer that waits
	// on an embedder or a model may wait (awaitAnswer).
	answerWait time.Duration
	// minIdleToClose replaces, when set (tests), the default minIdleToClose.
	minIdleToClose time.Duration
	// tracked, when set (tests), is told each state a connection enters once
	// the server has recorded it (track).
	tracked func(http.ConnState)
	// IdleTimeout closes a kept-alive connection that sends no next request
	// (default 2 minutes).
	IdleTimeout time.Duration
	// MaxConnections bounds the connections served at once (default
	// DefaultMaxConnections); further clients wait to be accepted until one closes.
	// Keep it well below the process's file descriptor limit: the event log and the
	// bus need descriptors too.
	MaxConnections int
	// MaxBody bounds a request body of the routes that set no bound of their own
	// (Route.MaxBody; default DefaultMaxBody).
	MaxBody int64
	// Auth is who may call the API and how often; CORS which web origins may.
	Auth AuthConfig
	CORS CORSConfig
	// TrustedProxies are the reverse proxies (CIDR prefixes or addresses) whose
	// X-Forwarded-For is believed: a request that comes through one is counted,
	// for the login limit and every other per-client limit, as its client's, the
	// rightmost address of X-Forwarded-For that is not a trusted proxy. None (the
	// default) trusts no proxy: X-Forwarded-For is ignored.
	TrustedProxies []string
}

// DefaultMaxConnections is the default of HTTPConfig.MaxConnections.
const DefaultMaxConnections = 4096

// DefaultMinBodyRate is the default of HTTPConfig.MinBodyRate: 64 KiB/s.
const DefaultMinBodyRate = 64 << 10

// Validate reports limits that cannot work.
func (c HTTPConfig) Validate() error {
	var errs []error
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.MaxConnections < 0 || c.MaxBody < 0 ||
		c.MinBodyRate < 0 || c.MaxBodyTime < 0 {
		errs = append(errs, errors.New("node: HTTP timeouts, the connection limit and the body limits must not be negative"))
	}
	if c.MaxBodyTime > 0 && c.ReadTimeout > c.MaxBodyTime {
		errs = append(errs, errors.New("node: the HTTP max body time must be at least the read timeout"))
	}
	_, proxies := parseProxies(c.TrustedProxies)
	return errors.Join(append(errs, c.Auth.Validate(), c.CORS.Validate(), proxies)...)
}

func (c *HTTPConfig) setDefaults() {
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = defaultWriteTimeout
	}
	if c.MinBodyRate == 0 {
		c.MinBodyRate = DefaultMinBodyRate
	}
	if c.MaxBodyTime == 0 {
		c.MaxBodyTime = max(10*time.Minute, c.ReadTimeout)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
}

// HTTPServer serves the node's HTTP API (Handler) within the bounds of Config.HTTP.
type HTTPServer struct {
	srv *http.Server
	cfg HTTPConfig

	mu    sync.Mutex
	fresh map[net.Conn]struct{} // connections no request came on yet (http.StateNew)
	// idle are the kept-alive connections waiting for their next request
	// (http.StateIdle), with the time they went idle: at the connection limit,
	// the one idle the longest, if for minIdleToClose, is closed for a new client
	// (closeIdle).
	idle map[net.Conn]time.Time
}

// minIdleToClose is how long a kept-alive connection must have been idle before
// it is closed for a client waiting at the connection limit: one idle for less
// may carry its client's next request already, which a client sends again only
// if it is replayable (a POST is lost). At the limit the server then keeps
// connections alive as one with a 5 s idle timeout does (Node.js's default).
const minIdleToClose = 5 * time.Second

// idleRecheck is how often a client waiting at the connection limit looks again
// for a connection idle long enough to close.
const idleRecheck = 250 * time.Millisecond

// freshGrace is how long Shutdown lets a connection that no request came on yet
// (a client's spare one, a proxy's preconnect) send one before it closes it:
// net/http would wait 5 s for each such connection.
const freshGrace = 500 * time.Millisecond

// HTTPServer returns a server of the node's HTTP API. Shutting it down ends the
// node's live streams.
func (n *Node) HTTPServer() *HTTPServer {
	cfg := n.cfg.HTTP
	srv := &http.Server{
		Handler:           paceBodies(cfg, n.Handler()),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		// What net/http reports itself (a handler's panic, an accept error it
		// retries) goes to the node's log, redacted, one record per report.
		ErrorLog: slog.NewLogLogger(n.cfg.Logger.With("component", "http").Handler(), slog.LevelError),
	}
	// Live streams never end on their own: end them when shutdown begins.
	srv.RegisterOnShutdown(n.CloseStreams)
	s := &HTTPServer{srv: srv, cfg: cfg, fresh: map[net.Conn]struct{}{}, idle: map[net.Conn]time.Time{}}
	srv.ConnState = s.track
	return s
}

// track keeps the connections no request came on yet, and those kept alive idle.
func (s *HTTPServer) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	if state == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
	if state == http.StateIdle {
		s.idle[c] = time.Now()
	} else {
		delete(s.idle, c)
	}
	s.mu.Unlock()
	if s.cfg.tracked != nil {
		s.cfg.tracked(state)
	}
}

// closeIdle closes the kept-alive connection idle the longest, if it has been
// idle for minIdleToClose. Serve calls it while a
// client that connected waits because the server holds MaxConnections: without
// it, clients that keep as many connections as the limit open and idle (each
// sending a request before IdleTimeout) would keep every other client waiting to
// be accepted. Closing an idle connection is what IdleTimeout does too: an HTTP
// client sends its next request on a new one.
func (s *HTTPServer) closeIdle() {
	s.mu.Lock()
	var oldest net.Conn
	var since time.Time
	for c, t := range s.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest == nil || time.Since(since) < cmp.Or(s.cfg.minIdleToClose, minIdleToClose) {
		s.mu.Unlock()
		return
	}
	delete(s.idle, oldest)
	s.mu.Unlock()
	_ = oldest.Close()
}

// closeFresh closes the connections no request came on yet.
func (s *HTTPServer) closeFresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.fresh {
		_ = c.Close()
		delete(s.fresh, c)
	}
}

// Serve accepts connections on ln until Shutdown or Close; it returns
// http.ErrServerClosed then.
func (s *HTTPServer) Serve(ln net.Listener) error {
	return s.srv.Serve(limitListener(ln, s.cfg.MaxConnections, s.closeIdle))
}

// Shutdown stops accepting connections, ends live streams and waits (until ctx is
// done) for the requests in flight. A connection no request came on within
// freshGrace of the start is closed (net/http would wait 5 s for it).
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTimer(freshGrace)
		defer t.Stop()
		select {
		case <-t.C:
			s.closeFresh()
		case <-done:
		}
	}()
	return s.srv.Shutdown(ctx)
}

// Close closes the listeners and every connection at once.
func (s *HTTPServer) Close() error { return s.srv.Close() }

// paceBodies lets the body of a request to h take longer than ReadTimeout while
// it keeps coming at MinBodyRate (HTTPConfig.ReadTimeout says why that rule):
// net/http sets the connection's read deadline to ReadTimeout from the request's
// start; each read of the body moves it to where the average rate since then
// would fall below MinBodyRate, never past MaxBodyTime. A read past the deadline
// fails as the server's own timeout does (a net.Error that is a Timeout), which
// the routes answer 408.
func paceBodies(cfg HTTPConfig, h http.Handler) http.Handler {
	if cfg.MinBodyRate <= 0 || cfg.ReadTimeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orig := r.Body
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), cfg: cfg, start: time.Now()}
		}
		h.ServeHTTP(w, r)
		r.Body = orig // net/http's own, as answerUnread says why
	})
}

// pacedBody extends the connection's read deadline as its body arrives.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	cfg   HTTPConfig
	start time.Time
	n     int64 // bytes read so far
	off   bool  // the deadline cannot be set (not a net/http connection): leave it
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if !b.off {
		earned := time.Duration(float64(b.n) / float64(b.cfg.MinBodyRate) * float64(time.Second))
		d := b.cfg.ReadTimeout + earned
		if d > b.cfg.MaxBodyTime {
			d = b.cfg.MaxBodyTime
		}
		if err := b.rc.SetReadDeadline(b.start.Add(d)); err != nil {
			b.off = true
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// limitListener returns a listener that has at most max connections open at once:
// Accept waits for one of them to close before it accepts another (which waits in
// the kernel's accept queue meanwhile, holding no descriptor of the process).
func limitListener(ln net.Listener, max int, full func()) *connLimit {
	return &connLimit{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{}), full: full}
}

type connLimit struct {
	net.Listener
	slots     chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
	// full is called while a client that connected waits for a slot; it frees
	// one if it can (HTTPServer.closeIdle).
	full func()
}

// Accept waits for a client, then for a free slot: a client that connects while
// every slot is taken has full free one (now, or as soon as it can: it asks
// again every idleRecheck), else waits until a connection closes. So one
// connection past the limit at most is held, the one being accepted.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
		return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
	default:
	}
	// Every slot is taken: have full free one, now or once a connection has
	// been idle long enough, unless one closes first.
	recheck := time.NewTicker(idleRecheck)
	defer recheck.Stop()
	for {
		l.full()
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		case <-l.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		case <-recheck.C:
		}
	}
}

func (l *connLimit) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitedConn gives its slot back when it is first closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
