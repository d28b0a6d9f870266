package mcp_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// silenceCutter forwards TCP connections to target and cuts each one that carried
// no byte either way for cut, as a reverse proxy cuts a response that stays silent
// (nginx's proxy_read_timeout, 60 s by default; a load balancer's idle timeout).
type silenceCutter struct {
	ln   net.Listener
	cuts atomic.Int64
	wg   sync.WaitGroup
}

func newSilenceCutter(t *testing.T, target string, cut time.Duration) *silenceCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silenceCutter{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c, target, cut) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *silenceCutter) forward(c net.Conn, target string, cut time.Duration) {
	defer c.Close()
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer s.Close()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	tick := time.NewTicker(cut / 20)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if time.Since(time.Unix(0, last.Load())) >= cut {
				p.cuts.Add(1)
				return // both closed: the client's response ends mid-body
			}
		}
	}
}

// TestServerNotificationStreamOutlivesAProxysReadTimeout: a client's stream of
// notifications (the GET of Streamable HTTP) with nothing to notify stays open
// behind a reverse proxy that cuts a response silent for less than the server's
// ping interval (SessionTimeout/30: a minute by default, nginx's
// proxy_read_timeout is a minute too; 20 s here). The Python SDK's client gives
// the stream up after two cuts in a row, and then gets no notification again
// (tools/list_changed, resources/updated, log messages) for the rest of its session.
func TestServerNotificationStreamOutlivesAProxysReadTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past a proxy's read timeout")
	}
	r := newRestartable(t, mcp.ServerOptions{}, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A session of a client of its own, which opens no stream of notifications.
	init, err := http.NewRequestWithContext(ctx, http.MethodPost, r.hs.URL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"idle","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	init.Header.Set("Content-Type", "application/json")
	init.Header.Set("Accept", "application/json, text/event-stream")
	ir, err := freshConns.Do(init)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, ir.Body)
	ir.Body.Close()
	id := ir.Header.Get("Mcp-Session-Id")
	if ir.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %s, session %q", ir.Status, id)
	}
	nr := post(ctx, t, r.hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	nr.Body.Close()
	const cut = 20 * time.Second
	proxy := newSilenceCutter(t, strings.TrimPrefix(r.hs.URL, "http://"), cut)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy.ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
		ended <- sc.Err()
	}()
	select {
	case err := <-ended:
		if err == nil {
			err = io.EOF
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the stream of notifications ended after %d cut(s) by a proxy that cuts responses silent for %s: %v; it carried %q",
			proxy.cuts.Load(), cut, err, lines)
	case <-time.After(cut + 5*time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		if strings.HasPrefix(l, "data:") || strings.HasPrefix(l, "event:") {
			t.Errorf("an idle stream of notifications carried an event: %q", lines)
		}
	}
}
