package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTPConfig bounds the node's HTTP server (Node.HTTPServer). Zero fields take the
// defaults.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default 30 s): a
	// client that sends its request slower has its connection closed.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response (default 30 s). A live stream (SSE)
	// extends it before each write, so it bounds each write, not the stream.
	WriteTimeout time.Duration
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

// Validate reports limits that cannot work.
func (c HTTPConfig) Validate() error {
	var errs []error
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.MaxConnections < 0 || c.MaxBody < 0 {
		errs = append(errs, errors.New("node: HTTP timeouts, the connection limit and the body limit must not be negative"))
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
		c.WriteTimeout = 30 * time.Second
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
}

// freshGrace is how long Shutdown lets a connection that no request came on yet
// (a client's spare one, a proxy's preconnect) send one before it closes it:
// net/http would wait 5 s for each such connection.
const freshGrace = 500 * time.Millisecond

// HTTPServer returns a server of the node's HTTP API. Shutting it down ends the
// node's live streams.
func (n *Node) HTTPServer() *HTTPServer {
	cfg := n.cfg.HTTP
	srv := &http.Server{
		Handler:           n.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
	// Live streams never end on their own: end them when shutdown begins.
	srv.RegisterOnShutdown(n.CloseStreams)
	s := &HTTPServer{srv: srv, cfg: cfg, fresh: map[net.Conn]struct{}{}}
	srv.ConnState = s.track
	return s
}

// track keeps the connections no request came on yet.
func (s *HTTPServer) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
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
	return s.srv.Serve(limitListener(ln, s.cfg.MaxConnections))
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

// limitListener returns a listener that has at most max connections open at once:
// Accept waits for one of them to close before it accepts another (which waits in
// the kernel's accept queue meanwhile, holding no descriptor of the process).
func limitListener(ln net.Listener, max int) net.Listener {
	return &connLimit{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{})}
}

type connLimit struct {
	net.Listener
	slots     chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *connLimit) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
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
