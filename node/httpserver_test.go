package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// serveHTTP starts a node with cfg and its HTTPServer on a loopback port, for the
// test's lifetime. The listener under the server counts the connections open at once.
func serveHTTP(t *testing.T, cfg node.Config) (*node.Node, string, *countingListener) {
	t.Helper()
	n := nodetest.Start(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := n.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case err := <-done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return n, "http://" + ln.Addr().String(), cl
}

// countingListener records the most connections it had open at once.
type countingListener struct {
	net.Listener
	open, max atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	open := l.open.Add(1)
	for {
		m := l.max.Load()
		if open <= m || l.max.CompareAndSwap(m, open) {
			break
		}
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// postAs posts body with the given Content-Type and returns the status and the error
// message of the answer, if any.
func postAs(t *testing.T, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Error
}

func noSessions(t *testing.T, n *node.Node) {
	t.Helper()
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil || len(infos) != 0 {
		t.Fatalf("rejected requests wrote sessions: %v %v", infos, err)
	}
}

// Clients that send a request body a byte at a time, slower than the read timeout,
// and reconnect as soon as they are cut (a slowloris attack) have their connections
// closed; the server never holds more connections than its limit, and /healthz keeps
// answering while the attack goes on.
func TestSlowRequestBodiesAreCutAndHealthzKeepsAnswering(t *testing.T) {
	const limit, attackers = 8, 24
	readTimeout := 300 * time.Millisecond
	_, base, cl := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{
		ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, WriteTimeout: 2 * time.Second,
		IdleTimeout: time.Second, MaxConnections: limit}})
	addr := strings.TrimPrefix(base, "http://")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cut atomic.Int64
	cutOnce := make([]atomic.Bool, attackers)
	var distinct atomic.Int64
	for i := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				closed := make(chan struct{})
				go func() {
					defer close(closed)
					_, _ = io.Copy(io.Discard, c) // until the server closes the connection
				}()
				_, _ = io.WriteString(c, "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
				tick := time.NewTicker(2 * readTimeout)
			trickle:
				for {
					select {
					case <-stop:
						tick.Stop()
						c.Close()
						<-closed
						return
					case <-closed:
						break trickle
					case <-tick.C:
						_, _ = io.WriteString(c, " ")
					}
				}
				tick.Stop()
				c.Close()
				cut.Add(1)
				if !cutOnce[i].Swap(true) {
					distinct.Add(1)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// Every attacker is cut at least once, and /healthz answers while they keep on.
	deadline := time.Now().Add(20 * time.Second)
	for distinct.Load() < attackers {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of %d slow clients were ever disconnected (%d cuts); open connections: %d",
				distinct.Load(), attackers, cut.Load(), cl.open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	for range 3 {
		resp, err := client.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("/healthz during the attack: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz during the attack: %d", resp.StatusCode)
		}
	}
	// The limit bounds the connections served; one more, accepted, may wait for
	// a slot (Serve accepts a client before it knows that no idle one can go).
	if m := cl.max.Load(); m > limit+1 {
		t.Fatalf("the server held %d connections at once; the limit is %d (and one waiting)", m, limit)
	}
}

// Clients that keep as many connections as the limit open and idle (kept alive,
// each sending a request now and then) kept every other client waiting to be
// accepted, up to IdleTimeout and longer. A client that connects while the server
// holds its limit has the connection idle the longest closed for it, as
// IdleTimeout would close it: the client of that one reconnects at its next
// request.
func TestClientsAtTheConnectionLimitTakeIdleConnections(t *testing.T) {
	const limit = 2
	cfg := node.HTTPConfig{IdleTimeout: time.Hour, MaxConnections: limit}
	node.ShortenMinIdleToClose(&cfg, 100*time.Millisecond)
	// A client has its answer before the server records its connection idle:
	// each request waits for that, so that the first connection went idle
	// first on the server's clock too.
	idle := make(chan struct{}, 16)
	node.TellConnStates(&cfg, func(s http.ConnState) {
		if s == http.StateIdle {
			idle <- struct{}{}
		}
	})
	_, base, _ := serveHTTP(t, node.Config{HTTP: cfg})
	get := func(c *http.Client) bool {
		t.Helper()
		reused := getHealthz(t, base, c, 20*time.Second)
		select {
		case <-idle:
		case <-time.After(20 * time.Second):
			t.Fatal("the server did not record the connection idle")
		}
		return reused
	}
	client := func() *http.Client { return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}} }
	first, second := client(), client()
	get(first)
	get(second)
	if !get(second) {
		t.Fatal("a kept-alive connection was not reused")
	}
	// Both connections are idle, the first the longest: a third client is served.
	get(client())
	if get(first) {
		t.Fatal("the first client's connection, idle the longest, was not the one closed")
	}
}

// getHealthz GETs /healthz with c within wait, and says whether c reused a
// kept-alive connection for it.
func getHealthz(t *testing.T, base string, c *http.Client, wait time.Duration) (reused bool) {
	t.Helper()
	{
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET /healthz at the connection limit: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: %d", resp.StatusCode)
		}
		return reused
	}
}

// A connection idle for a moment may carry its client's next request already, which
// the client sends again only if it can (a POST is lost): at the connection limit,
// one idle for less than the minimum is not closed for a new client, which waits.
func TestConnectionsIdleForAMomentAreNotClosedAtTheLimit(t *testing.T) {
	cfg := node.HTTPConfig{IdleTimeout: time.Hour, MaxConnections: 1}
	node.ShortenMinIdleToClose(&cfg, time.Hour)
	_, base, _ := serveHTTP(t, node.Config{HTTP: cfg})
	kept := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	getHealthz(t, base, kept, 20*time.Second)
	waiting := &http.Client{Timeout: 300 * time.Millisecond}
	if resp, err := waiting.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a connection idle for a moment was closed for a new client")
	}
	if !getHealthz(t, base, kept, 20*time.Second) {
		t.Fatal("the kept-alive connection was closed")
	}
}

// A client waiting at the connection limit when no connection is idle is served
// once one has been idle for the minimum, not only when one closes (here the
// idle timeout is an hour).
func TestAClientWaitingAtTheLimitTakesAConnectionThatGoesIdleLater(t *testing.T) {
	cfg := node.HTTPConfig{IdleTimeout: time.Hour, MaxConnections: 1}
	node.ShortenMinIdleToClose(&cfg, 100*time.Millisecond)
	_, base, _ := serveHTTP(t, node.Config{HTTP: cfg})
	busy, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// A request under way: its headers are not all sent yet.
	if _, err := io.WriteString(busy, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		c := &http.Client{Timeout: 15 * time.Second}
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		served <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiting client is accepted and finds nothing idle
	if _, err := io.WriteString(busy, "\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("a client waiting while the only connection was busy, then idle: %v", err)
	}
}

// A live stream outlives the server's read and write timeouts: it extends its write
// deadline before each write, and events sent after the timeouts have passed arrive.
func TestSSEOutlivesTheReadAndWriteTimeouts(t *testing.T) {
	timeout := 200 * time.Millisecond
	n, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{ReadTimeout: timeout, WriteTimeout: timeout}})
	nodetest.Run(t, n, "long-stream", "echo first")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sessions/long-stream/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	waitFor := func(id string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the stream ended before event %s", id)
				}
				if l == "id: "+id {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no event %s on the stream", id)
			}
		}
	}
	waitFor("4") // the first task's last event (an echo is 4 events)
	// What this test checks is that time passes beyond both timeouts; nothing is
	// synchronized by this wait.
	time.Sleep(5 * timeout)
	if code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo second","session_id":"long-stream"}`); code != http.StatusAccepted {
		t.Fatalf("second task: %d %s", code, msg)
	}
	waitFor("8")
}

// A stream of a session that does not exist answers 404 at once, with or without
// Last-Event-ID, instead of waiting forever.
func TestSSEOnUnknownSessionIs404(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	nodetest.Run(t, n, "known", "echo x")
	client := &http.Client{Timeout: 10 * time.Second}
	for _, last := range []string{"", "1", "5", "9223372036854775807"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/sessions/nope/stream", nil)
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("Last-Event-ID %q: %v", last, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("Last-Event-ID %q: %d", last, resp.StatusCode)
		}
	}
	// A seq beyond what the log can store is a bad header, not a wait.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/sessions/known/stream", nil)
	req.Header.Set("Last-Event-ID", "18446744073709551615")
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID beyond int64: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A known session that the client has read to its end stays open (200).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sessions/known/stream", nil)
	req.Header.Set("Last-Event-ID", "4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("known session read to its end: %d", resp.StatusCode)
	}
}

// Shutdown does not wait for a connection no request ever came on (a client's
// spare connection, a proxy's preconnect), which net/http would wait 5 s for: it
// closes it, while a request that is running gets its answer.
func TestShutdownClosesConnectionsNoRequestCameOn(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	// A kept-alive connection that served a request is closed at once by Shutdown;
	// make sure the spare one is accepted before shutting down.
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (it waited for the connection no request came on)", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the spare connection: %v, want it closed by the server", err)
	}
}
