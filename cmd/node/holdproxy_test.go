package main

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// holdProxy forwards TCP connections to a server, and stalls as a network does
// when the test says: once HoldAt armed it, the first request of a client that
// carries one of the given texts (a query's) stops the proxy, and from then on
// nothing passes either way on any connection (what each side sends waits in the
// proxy, in order, and every socket stays open; a connection opened meanwhile is
// accepted and held too) until Release, after which each connection passes on
// what it held and goes on forwarding. A side that closed its connection while
// held has what it sent passed on before the other side is closed.
type holdProxy struct {
	tcpProxy
	cond *sync.Cond // on mu: a stream got bytes or ended, or the proxy was released or closed
	// markers are the texts HoldAt armed the proxy with (nil: not armed); held
	// says whether it holds.
	markers []string
	held    bool
	// marked counts the connections on which a client sent a marker since the
	// proxy was armed: the first stopped the proxy, the others were held.
	marked int
	// heldUp and heldDown count the bytes held, from clients and from the server.
	heldUp, heldDown int
	streams          map[*holdStream]struct{}
}

// holdStream is one direction of a proxied connection.
type holdStream struct {
	from, to   net.Conn
	fromClient bool
	pending    []byte // read from from, not yet written to to
	ended      bool   // from is done: close both sides once pending is written
	writing    bool   // what was pending is being written to to
	// recent ends what a client sent on the stream (a marker may straddle two
	// reads), and marked says whether it sent a marker since the proxy was armed.
	recent []byte
	marked bool
}

// startHoldProxy listens on a loopback port and forwards to target until the test
// ends.
func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	p := &holdProxy{streams: map[*holdStream]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.listen(t, target, p.add)
	t.Cleanup(p.Close)
	return p
}

// add forwards the client connection c to the server connection s.
func (p *holdProxy) add(c, s net.Conn) {
	up, down := &holdStream{from: c, to: s, fromClient: true}, &holdStream{from: s, to: c}
	p.streams[up], p.streams[down] = struct{}{}, struct{}{}
	p.wg.Add(4)
	for _, st := range []*holdStream{up, down} {
		go p.read(st)
		go p.write(st)
	}
}

// read takes what st's sender sends, into st.pending, until the sender closes or
// the proxy does. Once the proxy is armed, it looks for the markers in what a
// client sends, and the first it finds stops the proxy before what carries it
// can pass.
func (p *holdProxy) read(st *holdStream) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := st.from.Read(buf)
		p.mu.Lock()
		if n > 0 {
			st.pending = append(st.pending, buf[:n]...)
			if st.fromClient && p.markers != nil {
				seen := append(st.recent, buf[:n]...)
				for _, m := range p.markers {
					if !st.marked && bytes.Contains(seen, []byte(m)) {
						st.marked = true
						p.marked++
						p.held = true
					}
				}
				st.recent = append(st.recent[:0], seen[max(0, len(seen)-256):]...)
			}
			if p.held && st.fromClient {
				p.heldUp += n
			} else if p.held {
				p.heldDown += n
			}
		}
		if err != nil {
			st.ended = true
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// write passes st.pending on whenever the proxy does not hold, and closes both
// sides of the connection once st's sender ended and everything it sent was
// passed on.
func (p *holdProxy) write(st *holdStream) {
	defer p.wg.Done()
	defer func() {
		st.from.Close()
		st.to.Close()
		p.mu.Lock()
		delete(p.streams, st)
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		for !p.closed && (p.held || (len(st.pending) == 0 && !st.ended)) {
			p.cond.Wait()
		}
		out, ended, closed := st.pending, st.ended, p.closed
		st.pending, st.writing = nil, len(out) > 0
		p.mu.Unlock()
		if closed {
			return
		}
		if len(out) > 0 {
			_, err := st.to.Write(out)
			p.mu.Lock()
			st.writing = false
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
		if ended && len(out) == 0 {
			return
		}
	}
}

// HoldAt arms the proxy: the first request a client sends from now on that
// carries one of markers (a query's text) stops it, with that request held.
func (p *holdProxy) HoldAt(markers ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markers, p.marked, p.heldUp, p.heldDown = markers, 0, 0, 0
	for st := range p.streams {
		st.recent, st.marked = nil, false
	}
}

// awaitHeld waits, within, until a marked request stopped the proxy, and
// reports whether one did.
func (p *holdProxy) awaitHeld(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if held {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// Release disarms the proxy, passes on what it held and goes on forwarding. It
// returns the connections on which a client sent a marker since HoldAt, and the
// bytes held from clients and from the server.
func (p *holdProxy) Release() (marked, fromClients, fromServer int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markers, p.held = nil, false
	p.cond.Broadcast()
	return p.marked, p.heldUp, p.heldDown
}

// awaitPassed waits, within, until what clients sent was all passed on to the
// server, and reports whether it was.
func (p *holdProxy) awaitPassed(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		left := 0
		for st := range p.streams {
			if st.fromClient && (len(st.pending) > 0 || st.writing) {
				left++
			}
		}
		p.mu.Unlock()
		if left == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// Close stops the proxy and closes every connection, dropping what it held.
func (p *holdProxy) Close() {
	p.shut(func() {
		for st := range p.streams {
			st.from.Close()
			st.to.Close()
		}
		p.cond.Broadcast()
	})
}
