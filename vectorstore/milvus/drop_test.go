package milvus_test

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// holeProxy forwards TCP connections to a server until it swallows them: then the
// connections open at that moment stay open but carry nothing more either way, as
// when a NAT or proxy on the path forgets a connection without a reset. New
// connections are forwarded as before.
type holeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   []*atomic.Bool // per connection: swallowed
	conns  []net.Conn
}

func startHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *holeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		hole := new(atomic.Bool)
		p.mu.Lock()
		p.open = append(p.open, hole)
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go pipeUnlessHole(c, s, hole)
		go pipeUnlessHole(s, c, hole)
	}
}

// pipeUnlessHole copies from one side to the other, and drops what it reads once
// hole is set.
func pipeUnlessHole(from, to net.Conn, hole *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !hole.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				to.Close()
			}
			return
		}
	}
}

// swallow silences every connection open now.
func (p *holeProxy) swallow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.open {
		h.Store(true)
	}
}

// A connection that goes silent (no reset, no answer) is replaced within a couple
// of seconds, whether it was idle (the request checks it first) or had just
// answered (the request, waiting, checks it): the first request after it succeeds
// well within 8 s, where gRPC's keepalive alone (a ping after 10 s of silence, 10 s
// to answer) took about 19 s.
func TestSilentlyDroppedConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	for _, idle := range []bool{true, false} {
		t.Run(map[bool]string{true: "idle", false: "busy"}[idle], func(t *testing.T) {
			t.Parallel()
			px := startHoleProxy(t, addr)
			s := newStore(t, milvus.Config{Addr: px.ln.Addr().String(), Prefix: testPrefix(t, addr), Consistency: milvus.Session})
			setup, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := s.Upsert(setup, "drop", []vectorstore.Item{{ID: "before", Vector: []float32{1, 0}}}); err != nil {
				t.Fatal(err)
			}
			if idle {
				time.Sleep(milvus.ProbeIdle + 200*time.Millisecond) // the connection lies idle, as a NAT forgets idle ones
			}
			px.swallow()
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
			defer cancel()
			start := time.Now()
			if err := s.Upsert(ctx, "drop", []vectorstore.Item{{ID: "after", Vector: []float32{0, 1}}}); err != nil {
				t.Fatalf("Upsert after the connection went silent: %v", err)
			}
			t.Logf("the first request after the connection went silent took %v", time.Since(start).Round(time.Millisecond))
			hits, err := s.Search(ctx, "drop", vectorstore.Query{Vector: []float32{1, 0}, K: 5})
			if ids := hitIDs(hits); err != nil || !slices.Equal(ids, []string{"before", "after"}) {
				t.Errorf("Search after the connection went silent: %v %v, want [before after]", ids, err)
			}
		})
	}
}
