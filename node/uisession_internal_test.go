package node

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// noMiss is the look-up callback of a test that does not limit look-ups.
func noMiss() error { return nil }

// A session lasts its TTL and no longer, and the sessions held stay within their
// bound: past it, the one that ends first is dropped.
func TestUISessionsEndAndStayBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := sha256.Sum256([]byte("a token of sixteen+"))
	s := newUISessions(time.Hour, 3, func() [][sha256.Size]byte { return [][sha256.Size]byte{tok} }, slog.Default())
	first, csrf, _, err := s.open(ctx, tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.lookup(ctx, first, now.Add(time.Hour-time.Second), noMiss); err != nil || !ok || got.token != tok ||
		got.csrf != sha256.Sum256([]byte(csrf)) || csrf == first {
		t.Fatalf("the session before its end: %v %v %+v", ok, err, got)
	}
	if _, ok, _ := s.lookup(ctx, first, now.Add(time.Hour), noMiss); ok {
		t.Error("the session is still there at its end")
	}
	ids := map[string]bool{}
	for i := range 5 {
		id, _, _, err := s.open(ctx, tok, now.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if ids[id] {
			t.Fatalf("session ID %q twice", id)
		}
		ids[id] = true
	}
	if s.size() != 3 {
		t.Errorf("%d sessions held, want the bound of 3", s.size())
	}
	kept := 0
	for id := range ids {
		if _, ok, _ := s.lookup(ctx, id, now.Add(5*time.Minute), noMiss); ok {
			kept++
		}
	}
	if kept != 3 {
		t.Errorf("%d of the sessions answer, want the latest 3", kept)
	}
}

// Over one log, a sign-in made by one node's sessions is found by another's
// (which does not hold it, and asks miss first), with its token and CSRF value;
// it is refused from its expiry on; its logout on the first reaches the second
// once the second reads it again (signInRefresh); and a node without its token
// does not take it. A node that held none of them, over a log whose sessions were
// dropped from memory (a restart), finds them too.
func TestUISessionsLiveInTheLog(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, other := sha256.Sum256([]byte("a token of sixteen+")), sha256.Sum256([]byte("another token, sixteen"))
	node := func(tokens ...[sha256.Size]byte) *uiSessions {
		s := newUISessions(time.Hour, 100, func() [][sha256.Size]byte { return tokens }, slog.Default())
		s.log = log
		return s
	}
	a, b, stranger := node(other, tok), node(tok, other), node(other)
	id, csrf, _, err := a.open(ctx, tok, now)
	if err != nil {
		t.Fatal(err)
	}
	misses := 0
	miss := func() error { misses++; return nil }
	got, ok, err := b.lookup(ctx, id, now.Add(time.Minute), miss)
	if err != nil || !ok || got.token != tok || got.csrf != sha256.Sum256([]byte(csrf)) || misses != 1 {
		t.Fatalf("the second node's look-up: %v %v %+v after %d misses", ok, err, got, misses)
	}
	if _, ok, _ := b.lookup(ctx, id, now.Add(time.Minute), miss); !ok || misses != 1 {
		t.Fatalf("a held session is looked up again: %v, %d misses", ok, misses)
	}
	if _, ok, _ := stranger.lookup(ctx, id, now.Add(time.Minute), noMiss); ok {
		t.Error("a node without the session's token takes it")
	}
	if _, ok, _ := node(tok).lookup(ctx, id, now.Add(time.Hour), noMiss); ok {
		t.Error("a restarted node takes a session at its expiry")
	}
	if err := a.end(ctx, id, "logout", now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.lookup(ctx, id, now.Add(2*time.Minute), noMiss); ok {
		t.Error("the session goes on on the node that ended it")
	}
	if _, ok, _ := b.lookup(ctx, id, now.Add(2*time.Minute+signInRefresh), noMiss); ok {
		t.Error("the session goes on on the other node after its refresh")
	}
	if _, ok, _ := node(tok).lookup(ctx, id, now.Add(2*time.Minute), noMiss); ok {
		t.Error("a restarted node takes a session that was logged out")
	}
	if err := b.end(ctx, id, "logout", now.Add(3*time.Minute)); err != nil {
		t.Errorf("a second logout: %v", err)
	}
	if events, _ := log.Read(ctx, signInStream(sha256.Sum256([]byte(id))), 1); len(events) != 2 {
		t.Errorf("the sign-in's stream holds %d events, want the sign-in and one logout", len(events))
	}
}

// The client IP is the connection's peer unless the peer is a trusted proxy; then
// it is the rightmost address of X-Forwarded-For that is not a trusted proxy.
func TestClientIPBehindTrustedProxies(t *testing.T) {
	g, err := newGate(HTTPConfig{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.7", "fd00::/8"}}, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := newGate(HTTPConfig{}, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		peer string
		xff  []string
		want string
		none string // the answer without trusted proxies
	}{
		{"203.0.113.9:5000", nil, "203.0.113.9", "203.0.113.9"},
		{"203.0.113.9:5000", []string{"198.51.100.1"}, "203.0.113.9", "203.0.113.9"}, // an untrusted peer's header is ignored
		{"10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1", "10.1.2.3"},
		{"10.1.2.3:5000", []string{"6.6.6.6, 198.51.100.1, 10.9.9.9"}, "198.51.100.1", "10.1.2.3"}, // the client's made-up left part is skipped
		{"10.1.2.3:5000", []string{"6.6.6.6", "198.51.100.1:4711, 192.0.2.7"}, "198.51.100.1", "10.1.2.3"},
		{"[fd00::1]:5000", []string{"[2001:db8::5]:80"}, "2001:db8::5", "fd00::1"},
		{"10.1.2.3:5000", []string{"10.4.4.4, 192.0.2.7"}, "10.4.4.4", "10.1.2.3"}, // every hop trusted: the leftmost
		{"10.1.2.3:5000", []string{"6.6.6.6, not-an-ip, 10.9.9.9"}, "10.9.9.9", "10.1.2.3"},
		{"10.1.2.3:5000", nil, "10.1.2.3", "10.1.2.3"},
	} {
		r := httptest.NewRequest("GET", "/v1/sessions", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := g.clientIP(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
		if got := open.clientIP(r); got != c.none {
			t.Errorf("without trusted proxies, peer %s, X-Forwarded-For %q: %s, want %s", c.peer, c.xff, got, c.none)
		}
	}
	if _, err := newGate(HTTPConfig{TrustedProxies: []string{"10.0.0.0/33"}}, slog.Default(), nil); err == nil {
		t.Error("a bad prefix is taken")
	}
}
