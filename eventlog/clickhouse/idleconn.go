package clickhouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// idleAfter is how long a connection to ClickHouse may carry nothing before it is
// no longer trusted (see suspectConn).
const idleAfter = time.Second

// dialer returns the DialContext of the clickhouse-go options: a TCP (or TLS)
// connection to addr whose first request after an idle spell must be answered
// within cfg.ResponseTimeout (suspectConn), and which the dial's ctx bounds until
// the server's first answer (suspectConn.awaitHello).
func dialer(cfg Config) func(ctx context.Context, addr string) (net.Conn, error) {
	conns := &suspectConns{all: map[*suspectConn]struct{}{}}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: cfg.DialTimeout}
		raw, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		sc := &suspectConn{Conn: raw, idleAfter: idleAfter, timeout: cfg.ResponseTimeout, last: time.Now(), siblings: conns}
		conns.add(sc)
		var conn net.Conn = sc
		if cfg.TLS == nil {
			sc.awaitHello(ctx)
			return conn, nil
		}
		tc := cfg.TLS
		if tc.ServerName == "" {
			// As tls.Dial does: the server's name is the address's host.
			tc = tc.Clone()
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tc.ServerName = host
			} else {
				tc.ServerName = addr
			}
		}
		t := tls.Client(conn, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			sc.Close()
			return nil, err
		}
		sc.awaitHello(ctx)
		return t, nil
	}
}

// suspectConns are the open connections of one dialer (one Log's pool).
type suspectConns struct {
	mu  sync.Mutex
	all map[*suspectConn]struct{}
}

func (s *suspectConns) add(c *suspectConn) {
	s.mu.Lock()
	s.all[c] = struct{}{}
	s.mu.Unlock()
}

func (s *suspectConns) remove(c *suspectConn) {
	s.mu.Lock()
	delete(s.all, c)
	s.mu.Unlock()
}

// forgottenSince closes the connections, other than dead, that sit in the pool and
// carried nothing since last, when dead's idle spell began: what forgot dead (a NAT, a load balancer) forgot them
// as well, and the driver would otherwise find each one dead in turn, after
// ResponseTimeout each, when it takes them from its pool.
func (s *suspectConns) forgottenSince(dead *suspectConn, last time.Time) {
	s.mu.Lock()
	var idle []*suspectConn
	for c := range s.all {
		if c != dead && c.idleSince(last) {
			idle = append(idle, c)
		}
	}
	s.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// suspectConn is a connection to ClickHouse that does not trust itself after it
// sat idle. A NAT, a load balancer or a firewall between the node and ClickHouse
// may forget an idle connection without telling either end: from then on its bytes
// vanish, no RST ever comes, and a query sent on it waits for its whole deadline
// (Config.QueryTimeout, a minute by default) before it fails. So a request written
// after idleAfter of silence must see the first byte of its answer within timeout
// (ClickHouse answers a query at once: an INSERT with the table's header, a SELECT
// with progress packets while it runs); until that byte comes, reads time out then,
// whatever longer deadline the driver set. The driver takes the error for a broken
// connection: it closes it, and the query is retried on a new one. From the first
// byte on, and on a connection in use, the driver's own deadlines apply.
type suspectConn struct {
	net.Conn
	idleAfter, timeout time.Duration

	siblings *suspectConns

	mu sync.Mutex
	// helloWait is set while the dial's ctx bounds the connection (awaitHello),
	// helloStop stops that; helloLost is why it ended before the hello came.
	helloWait   bool
	helloStop   func() bool
	helloLost   error
	last        time.Time // the last byte read or written
	probe       time.Time // when an answer must have begun; zero: none awaited
	idleFor     time.Duration
	readDriver  time.Time // the driver's read deadline
	readApplied time.Time // the read deadline set on Conn
}

// errNoAnswer is returned by a read that waited timeout for the answer to a
// request written on a connection that had been idle.
type errNoAnswer struct {
	timeout, idle time.Duration
}

func (e *errNoAnswer) Error() string {
	return fmt.Sprintf("eventlog/clickhouse: no answer within %s on a connection idle for %s before the request "+
		"(forgotten by a NAT or load balancer on the way?): %v", e.timeout, e.idle.Round(time.Millisecond), os.ErrDeadlineExceeded)
}

func (e *errNoAnswer) Unwrap() error { return os.ErrDeadlineExceeded }
func (e *errNoAnswer) Timeout() bool { return true }
func (e *errNoAnswer) Temporary() bool {
	return true
}

var _ net.Error = (*errNoAnswer)(nil)

func (c *suspectConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.helloLost != nil {
		err := c.helloLost
		c.mu.Unlock()
		return 0, err
	}
	now := time.Now()
	if now.Sub(c.last) >= c.idleAfter {
		// A request after an idle spell (and a request after one whose answer never
		// came: the driver had no reason to read it).
		c.probe, c.idleFor = now.Add(c.timeout), now.Sub(c.last)
		if err := c.applyLocked(); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.mu.Lock()
		c.last = time.Now()
		c.mu.Unlock()
	}
	return n, err
}

// awaitHello bounds the connection by ctx, the dial's, until the first byte of
// the server's answer comes (its hello): once ctx ends before that, every read
// and write fails at once (errNoHello). clickhouse-go's handshake, which runs
// after the dial, waits for the server's hello until its own deadline,
// DialTimeout from the dial, whatever ctx says: so a query whose ctx gave it
// 500ms waited 5 s (the default DialTimeout) on a server that accepts
// connections and never answers (hung, or stopped with SIGSTOP), and a health
// check built on one answered late. The bound ends at the hello, since the
// driver cancels ctx once it has the connection, which then serves other
// requests under their own deadlines.
func (c *suspectConn) awaitHello(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.helloWait = true
	c.helloStop = context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.helloWait {
			return
		}
		c.helloWait = false
		c.helloLost = &errNoHello{cause: context.Cause(ctx)}
		_ = c.Conn.SetWriteDeadline(aeons)
		c.applyLocked()
	})
}

// aeons is a deadline long past.
var aeons = time.Unix(1, 0)

// errNoHello fails the reads and writes of a connection whose dial's ctx ended
// before the server's first answer (suspectConn.awaitHello).
type errNoHello struct{ cause error }

func (e *errNoHello) Error() string {
	return fmt.Sprintf("eventlog/clickhouse: the server accepted the connection but did not answer before the request ended: %v", e.cause)
}

func (e *errNoHello) Unwrap() []error { return []error{e.cause, os.ErrDeadlineExceeded} }
func (e *errNoHello) Timeout() bool   { return true }
func (e *errNoHello) Temporary() bool { return true }

var _ net.Error = (*errNoHello)(nil)

func (c *suspectConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if c.helloLost != nil && err != nil {
		err = c.helloLost
		c.mu.Unlock()
		return n, err
	}
	if n > 0 && c.helloWait {
		c.helloWait = false
		c.helloStop()
	}
	if n > 0 {
		c.last = time.Now()
		if !c.probe.IsZero() {
			c.probe = time.Time{}
			c.applyLocked()
		}
	}
	if err != nil && !c.probe.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
		// No answer to a request sent after an idle spell: whichever deadline
		// ended the wait, the connection is taken for forgotten, and so are those
		// idle since before the spell began.
		since := c.probe.Add(-c.timeout - c.idleFor)
		if c.readDriver.IsZero() || c.readDriver.After(c.probe) {
			err = &errNoAnswer{timeout: c.timeout, idle: c.idleFor}
		}
		c.mu.Unlock()
		c.siblings.forgottenSince(c, since)
		return n, err
	}
	c.mu.Unlock()
	return n, err
}

// idleSince reports whether c carried nothing since t and is in no request (the
// driver sets a read deadline for each request, and clears it after).
func (c *suspectConn) idleSince(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.last.After(t) && c.readDriver.IsZero()
}

func (c *suspectConn) Close() error {
	c.mu.Lock()
	if c.helloWait {
		c.helloWait = false
		c.helloStop()
	}
	c.mu.Unlock()
	c.siblings.remove(c)
	return c.Conn.Close()
}

func (c *suspectConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := t
	if c.helloLost != nil {
		w = aeons
	}
	if err := c.Conn.SetWriteDeadline(w); err != nil {
		return err
	}
	c.readDriver = t
	return c.applyLocked()
}

func (c *suspectConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDriver = t
	return c.applyLocked()
}

// applyLocked sets Conn's read deadline: the driver's, or the probe's when that
// is earlier; one long past once the dial's ctx ended before the server's hello.
func (c *suspectConn) applyLocked() error {
	d := c.readDriver
	if !c.probe.IsZero() && (d.IsZero() || c.probe.Before(d)) {
		d = c.probe
	}
	if c.helloLost != nil {
		d = aeons
	}
	if d.Equal(c.readApplied) {
		return nil
	}
	c.readApplied = d
	return c.Conn.SetReadDeadline(d)
}

// SyscallConn lets the driver check the connection before it reuses it (a
// connection the server closed is seen at once).
func (c *suspectConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("eventlog/clickhouse: connection has no file descriptor")
	}
	return sc.SyscallConn()
}

// deadConnRetries is how many times a read query runs again after its connection
// turned out dead (errNoAnswer).
const deadConnRetries = 3

// rereading is a Log's connection pool: a read query whose connection turned out
// dead before any answer came (errNoAnswer: the network forgot the connection
// while it sat idle) runs again, on another connection, so that the caller sees a
// delay rather than an error. The writer retries its writes by itself.
//
// It also names the fix of an exhausted pool: a request that waited DialTimeout
// for one of the MaxOpenConns connections fails with errPoolExhausted.
type rereading struct {
	driver.Conn
	maxConns int // Config.MaxOpenConns
}

// errPoolExhausted is clickhouse-go's "acquire conn timeout" (ch.ErrAcquireConnTimeout,
// which it wraps): every connection of the pool was busy while the request
// waited DialTimeout for one.
type errPoolExhausted struct {
	maxConns int
	err      error
}

func (e *errPoolExhausted) Error() string {
	return fmt.Sprintf("all %d connections to ClickHouse were busy (raise Config.MaxOpenConns: the node's clickhouse_max_conns, "+
		"--clickhouse-max-conns or TROUPE_CLICKHOUSE_MAX_CONNS, and the server's max_concurrent_queries if need be): %v", e.maxConns, e.err)
}

func (e *errPoolExhausted) Unwrap() error { return e.err }

// poolErr wraps err in errPoolExhausted when the pool had no free connection.
func (c rereading) poolErr(err error) error {
	if err != nil && errors.Is(err, ch.ErrAcquireConnTimeout) {
		var done *errPoolExhausted
		if !errors.As(err, &done) {
			return &errPoolExhausted{maxConns: c.maxConns, err: err}
		}
	}
	return err
}

func (c rereading) Exec(ctx context.Context, query string, args ...any) error {
	return c.poolErr(c.Conn.Exec(ctx, query, args...))
}

func (c rereading) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	b, err := c.Conn.PrepareBatch(ctx, query, opts...)
	return b, c.poolErr(err)
}

// poolRow is a driver.Row whose error names the fix of an exhausted pool.
type poolRow struct {
	driver.Row
	err error
}

func (r poolRow) Err() error { return r.err }

func (r poolRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.Row.Scan(dest...)
}

func (r poolRow) ScanStruct(dest any) error {
	if r.err != nil {
		return r.err
	}
	return r.Row.ScanStruct(dest)
}

func isNoAnswer(err error) bool {
	var e *errNoAnswer
	return errors.As(err, &e)
}

func (c rereading) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	for attempt := 0; ; attempt++ {
		rows, err := c.Conn.Query(ctx, query, args...)
		if err == nil || attempt == deadConnRetries || !isNoAnswer(err) || ctx.Err() != nil {
			return rows, c.poolErr(err)
		}
	}
}

func (c rereading) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	for attempt := 0; ; attempt++ {
		row := c.Conn.QueryRow(ctx, query, args...)
		if err := row.Err(); err == nil || attempt == deadConnRetries || !isNoAnswer(err) || ctx.Err() != nil {
			if perr := c.poolErr(err); perr != err {
				return poolRow{row, perr}
			}
			return row
		}
	}
}
