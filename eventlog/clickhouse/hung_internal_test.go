package clickhouse

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// hungServer accepts connections and holds them without ever answering, as a
// ClickHouse server that hangs (or was stopped with SIGSTOP) does: the kernel
// completes the TCP handshake, and nothing more comes. It counts the
// connections it accepted.
func hungServer(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// TestHungServerHonorsCtx: a query on a server that accepts connections and
// never answers returns once its ctx ends, with an error that says so, not after
// the dial timeout. clickhouse-go's handshake waits for the server's hello until
// DialTimeout from the dial whatever the query's ctx says, so a health check
// that gave its query 300ms waited the dial timeout (5 s by default; a minute
// here) before.
func TestHungServerHonorsCtx(t *testing.T) {
	addr, accepted := hungServer(t)
	cfg := Config{Addr: []string{addr}, Database: "hung", DialTimeout: time.Minute, QueryTimeout: time.Minute,
		ResponseTimeout: time.Minute}.WithDefaults()
	conn, err := ch.Open(options(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := conn.Query(ctx, "SELECT 1")
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("query %d on a hung server: no error", i)
			}
			var nh *errNoHello
			if !errors.As(err, &nh) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("query %d on a hung server: %v; want an error saying the server did not answer before the query's deadline", i, err)
			}
			t.Logf("query %d on a hung server: %v", i, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("query %d on a hung server with a 300ms deadline still waits after 20 s (DialTimeout is a minute)", i)
		}
		cancel()
	}
	if n := accepted.Load(); n > 3 {
		t.Errorf("3 queries opened %d connections, want at most 3", n)
	}
}
