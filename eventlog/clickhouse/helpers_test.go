package clickhouse_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// Environment variables of the tests.
const (
	// envAddr holds the native address of a ClickHouse server, such as 127.0.0.1:9000.
	envAddr = "TROUPE_TEST_CLICKHOUSE"
	// envControl, set to 1, lets the outage test stop and start that server with
	// deploy/clickhouse.sh.
	envControl = "TROUPE_TEST_CLICKHOUSE_CONTROL"
	// envOutage sets how long the outage test keeps the server stopped (default 60s).
	envOutage = "TROUPE_TEST_CLICKHOUSE_OUTAGE"
)

// serverAddr returns the server's addresses, or skips the test.
func serverAddr(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(envAddr)
	if v == "" {
		t.Skipf("%s is not set: start ClickHouse (bash deploy/clickhouse.sh install && bash deploy/clickhouse.sh start && bash deploy/clickhouse.sh wait) and set %s=127.0.0.1:9000 to run this test",
			envAddr, envAddr)
	}
	return clickhouse.SplitAddr(v)
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rawConn connects to the server with the default database, the way an operator
// with clickhouse-client would.
func rawConn(t testing.TB, addr []string) driver.Conn {
	t.Helper()
	conn, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native, DialTimeout: 5 * time.Second, ReadTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// newDatabase returns a database name of the test's own, dropped when the test ends.
func newDatabase(t testing.TB, conn driver.Conn) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	db := "troupe_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	return db
}

// openLog opens a Log on a new database of the test's own and returns it with the
// database's name. cfg.Addr defaults to the test server; Close is registered.
func openLog(t testing.TB, cfg clickhouse.Config) (*clickhouse.Log, string) {
	t.Helper()
	addr := serverAddr(t)
	if cfg.Database == "" {
		cfg.Database = newDatabase(t, rawConn(t, addr))
	}
	if len(cfg.Addr) == 0 {
		cfg.Addr = addr
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	l, err := clickhouse.Open(testCtx(t, time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l, cfg.Database
}

// testLogger returns a logger that writes to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// event returns event seq of session, with a real payload of the type a session
// step writes.
func event(t testing.TB, session string, seq uint64) messages.Envelope {
	t.Helper()
	var p messages.Payload = &messages.ModelRequested{Key: fmt.Sprintf("%s/m%d", session, seq), Model: "offline", Step: int(seq), Messages: 2 * int(seq), PromptHash: "9f86d081884c7d65"}
	switch seq % 4 {
	case 1:
		p = &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "default"}
	case 3:
		p = &messages.ModelResponded{Key: fmt.Sprintf("%s/m%d", session, seq-1), Model: "offline",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"}, LatencyUS: 812}
	case 0:
		p = &messages.ToolCallCompleted{Key: "k", CallID: "call_1", Tool: "calculator", Result: "144", LatencyUS: 35}
	}
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID = fmt.Sprintf("%s/%d", session, seq)
	e.SessionID = session
	e.Seq = seq
	e.CorrelationID = session + "/1"
	if seq > 1 {
		e.CausationID = fmt.Sprintf("%s/%d", session, seq-1)
	}
	e.TS = 1_767_225_600_000_000 + int64(seq)
	e.Actor = "session"
	return e
}

// proxy forwards TCP connections to a server, and can be taken down (every
// connection cut, new ones refused) and up again on the same port: an outage of the
// network between a node and ClickHouse, without touching the server. It can also
// forget its connections (forget), as a NAT or a load balancer forgets idle ones.
type proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	accepted  atomic.Int64 // connections forwarded so far
	forgotten atomic.Int64 // connections accepted before this many are forgotten
	vanished  atomic.Int64 // bytes sent on forgotten connections
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	p := &proxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

func (p *proxy) forward(c net.Conn) {
	n := p.accepted.Add(1)
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer func() {
			_ = dst.Close()
			_ = src.Close()
		}()
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 && n <= p.forgotten.Load() {
				p.vanished.Add(int64(k)) // forgotten: the bytes vanish on the way
			} else if k > 0 {
				if _, err := dst.Write(buf[:k]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() { pipe(s, c) })
	wg.Go(func() { pipe(c, s) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// forget makes the connections open now forgotten, as by a NAT or load balancer
// whose idle timer expired: every byte sent on them either way vanishes from then
// on, with no RST and no FIN (their sockets stay open). New connections are
// forwarded.
func (p *proxy) forget() {
	p.forgotten.Store(p.accepted.Load())
}

// down cuts every connection and refuses new ones.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// up listens again on the same address.
func (p *proxy) up() {
	p.t.Helper()
	var (
		ln  net.Listener
		err error
	)
	for range 50 { // the port is ours, but the kernel may take a moment to free it
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy: listen on %s again: %v", p.addr, err)
	}
	p.serve(ln)
}

// databaseAt makes a new database holding the schema of the first n migrations,
// recorded as applied, as a build of that schema left it, and returns its name and a
// connection to it (with ReadTimeout readTimeout; 0: the driver's default).
func databaseAt(t *testing.T, ctx context.Context, addr []string, n int, readTimeout time.Duration) (string, driver.Conn) {
	t.Helper()
	raw := rawConn(t, addr)
	db := newDatabase(t, raw)
	if err := raw.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	ms, err := clickhouse.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native, Auth: ch.Auth{Database: db}, DialTimeout: 5 * time.Second, ReadTimeout: readTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	for _, m := range ms[:n] {
		for _, stmt := range m.Statements {
			if err := conn.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
		}
		b, err := conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name, applied_us)")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append(uint32(m.Version), m.Name, int64(0)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	return db, conn
}
