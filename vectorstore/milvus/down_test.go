package milvus_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// cutProxy forwards TCP connections to a server until it is cut: then it closes
// every connection and closes new ones at once, as a server that is down would
// refuse them, until it is restored.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	from.Close()
	to.Close()
	p.mu.Lock()
	delete(p.conns, from)
	delete(p.conns, to)
	p.mu.Unlock()
}

// setCut cuts the proxy (closing every connection) or restores it.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// A server that goes down makes requests fail as unreachable, each well within
// the request timeout (the SDK alone would retry for 22 s, past the 10 s timeout
// set here, and every request would end as a timeout); once it is back, the
// Store reconnects by itself and has lost nothing it acknowledged.
func TestServerDownFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	px := startCutProxy(t, addr)
	s := newStore(t, milvus.Config{Addr: px.ln.Addr().String(), Prefix: testPrefix(t, addr), Consistency: milvus.Session,
		RequestTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	q := vectorstore.Query{Vector: []float32{1, 0}, K: 5}
	if err := s.Upsert(ctx, "down", []vectorstore.Item{{ID: "before", Vector: []float32{1, 0}}}); err != nil {
		t.Fatal(err)
	}

	px.setCut(true)
	for op, call := range map[string]func() error{
		"Upsert": func() error {
			return s.Upsert(ctx, "down", []vectorstore.Item{{ID: "during", Vector: []float32{1, 1}}})
		},
		"Search": func() error { _, err := s.Search(ctx, "down", q); return err },
		"Delete": func() error { return s.Delete(ctx, "down", []string{"before"}) },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "Unavailable") || strings.Contains(err.Error(), "DeadlineExceeded") {
			t.Errorf("%s while the server is down: %v; want it unreachable (Unavailable), not a timeout", op, err)
		}
	}

	// Once the server is back, a request may still fail while gRPC waits out its
	// reconnection backoff (at most 3 s): the caller tries again, as a user would.
	px.setCut(false)
	for try := 1; ; try++ {
		err := s.Upsert(ctx, "down", []vectorstore.Item{{ID: "after", Vector: []float32{0, 1}}})
		if err == nil {
			break
		}
		if try == 10 {
			t.Fatalf("Upsert once the server is back, %d tries: %v", try, err)
		}
		time.Sleep(time.Second)
	}
	hits, err := s.Search(ctx, "down", q)
	if ids := hitIDs(hits); err != nil || !slices.Equal(ids, []string{"before", "after"}) {
		t.Errorf("Search once the server is back: %v %v, want [before after]", ids, err)
	}
}
