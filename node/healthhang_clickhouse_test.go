package node_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// hangProxy forwards TCP connections to a server until hang is set: from then
// on it accepts connections and holds them, and passes no byte either way on
// any, as a ClickHouse server that hangs (or was stopped with SIGSTOP) does. It
// counts the connections it accepted.
type hangProxy struct {
	hang     atomic.Bool
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func startHangProxy(t *testing.T, target string) (*hangProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{}
	keep := func(c net.Conn) {
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
	}
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			for p.hang.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			keep(c)
			go func() {
				u, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				keep(u)
				go pipe(u, c)
				pipe(c, u)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.hang.Store(false)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p, ln.Addr().String()
}

// TestHealthzWithAHungClickHouse: a node without Kafka on a ClickHouse log whose
// server accepts connections and never answers answers /healthz 503 with a
// reason naming the event log, while ClickHouse still hangs; checks every 100 ms
// open a connection per probe (one probe at a time), not one per check; /livez
// stays 200; once the server answers again, /healthz is 200. Before, /healthz
// answered 200 after 2 s (the health check's timeout, on a pooled connection),
// then 5 s (clickhouse-go's handshake waits DialTimeout whatever the query's ctx),
// past the second a Kubernetes probe waits by default.
func TestHealthzWithAHungClickHouse(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set")
	}
	target := clickhouse.SplitAddr(addr)[0]
	p, proxied := startHangProxy(t, target)
	db := chtest.Database(t, addr, "troupe_hung_")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg, err := clickhouse.Open(ctx, clickhouse.Config{Addr: []string{proxied}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	n := nodetest.Start(t, node.Config{Log: lg})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { p.hang.Store(false) }) // first: the server's Close waits for its handlers

	if code, reason := checkHealth(t, srv.URL, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before ClickHouse hangs: %d %s", code, reason)
	}
	p.hang.Store(true)
	var reason string
	waitFor(t, 10*time.Second, "/healthz to answer 503 while ClickHouse hangs", func() bool {
		var code int
		code, reason = checkHealth(t, srv.URL, "/healthz")
		return code == http.StatusServiceUnavailable
	})
	t.Logf("/healthz while ClickHouse hangs: %s", reason)
	if !strings.Contains(reason, "the event log (clickhouse) did not answer a probe") {
		t.Errorf("/healthz while ClickHouse hangs: %q; want a reason saying the event log did not answer", reason)
	}
	dials := p.accepted.Load()
	const checks = 20
	for range checks {
		if code, reason := checkHealth(t, srv.URL, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(reason, "the event log (clickhouse)") {
			t.Fatalf("/healthz while ClickHouse hangs: %d %q; want 503 naming the event log", code, reason)
		}
		if code, reason := checkHealth(t, srv.URL, "/livez"); code != http.StatusOK {
			t.Fatalf("/livez while ClickHouse hangs: %d %s; want 200: a restart does not cure a hung database", code, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One probe at a time, each bounded by 2 s: over these 20 checks (some 12 s,
	// each waiting 500ms), a connection per probe, a handful, not one per check.
	d := p.accepted.Load() - dials
	t.Logf("%d checks while ClickHouse hangs opened %d connections", checks, d)
	if d > 8 {
		t.Errorf("%d checks while ClickHouse hangs opened %d connections; want a few: one probe at a time", checks, d)
	}

	p.hang.Store(false)
	waitFor(t, 10*time.Second, "/healthz to answer 200 once ClickHouse answers again", func() bool {
		code, _ := checkHealth(t, srv.URL, "/healthz")
		return code == http.StatusOK
	})
}
