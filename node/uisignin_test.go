package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// startServed builds and starts a node with cfg, serves its Handler on a loopback
// port, and returns its base URL and a stop that ends both (also run at cleanup;
// a second call does nothing).
func startServed(t *testing.T, cfg node.Config) (string, func()) {
	t.Helper()
	n, stopNode := nodetest.StartWithStop(t, cfg)
	srv := httptest.NewServer(n.Handler())
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Close()
			stopNode()
		}
	}
	t.Cleanup(stop)
	return srv.URL, stop
}

// signIn logs in to the node at base with goodToken and returns the session
// cookie's value and the CSRF value.
func signIn(t *testing.T, base string) (session, csrf string) {
	t.Helper()
	resp, body, cookies := login(t, base, goodToken, nil)
	var ans node.LoginAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || cookies[node.SessionCookie] == nil {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	return cookies[node.SessionCookie].Value, ans.CSRF
}

// A dashboard sign-in outlives the node that made it: after the node restarts on
// the same data directory, the cookie still signs requests in, reads and
// (with its CSRF value) writes.
func TestDashboardSignInSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}}}
	base, stop := startServed(t, cfg)
	session, csrf := signIn(t, base)
	stop()

	base, _ = startServed(t, cfg)
	if code, body := withCookie(t, "GET", base+"/v1/sessions", session, "", nil); code != http.StatusOK {
		t.Fatalf("the cookie after a restart: %d %s, want 200", code, body)
	}
	hdr := map[string]string{node.CSRFHeader: csrf, "Sec-Fetch-Site": "same-origin"}
	if code, body := withCookie(t, "POST", base+"/v1/tasks", session, `{"input":"hello","session_id":"after-restart"}`, hdr); code != http.StatusAccepted {
		t.Errorf("a write with the cookie and its csrf value after a restart: %d %s, want 202", code, body)
	}
	if code, _ := withCookie(t, "POST", base+"/v1/tasks", session, `{"input":"hello","session_id":"no-csrf"}`, map[string]string{node.CSRFHeader: csrf + "x"}); code != http.StatusForbidden {
		t.Errorf("a write with another csrf value after a restart: %d, want 403", code)
	}
}

// Two nodes over one event log (a cluster behind a load balancer) share their
// dashboard sign-ins: a sign-in made on one signs requests in on the other; a
// logout on the second ends it on the first (which made and holds it) within a
// few seconds; a sign-in past its expiry is refused by both. The log holds none of
// the cookies, CSRF values or the token, and its listings do not count sign-ins as
// sessions.
func TestDashboardSignInsAreSharedByTheNodesOfALog(t *testing.T) {
	log, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	cfg := func(ttl time.Duration) node.Config {
		return node.Config{Log: log, DataDir: t.TempDir(), HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}, SessionTTL: ttl}}}
	}
	a, _ := startServed(t, cfg(time.Hour))
	b, _ := startServed(t, cfg(time.Hour))

	session, csrf := signIn(t, a)
	if code, body := withCookie(t, "GET", b+"/v1/sessions", session, "", nil); code != http.StatusOK {
		t.Fatalf("a sign-in of node a on node b: %d %s, want 200", code, body)
	}
	hdr := map[string]string{node.CSRFHeader: csrf, "Sec-Fetch-Site": "same-origin"}
	// A cancel of a session that does not exist passes the gate (the csrf value of
	// node a is checked on node b) and is answered 404 by its route; without the
	// value the gate answers 403. (No task is started: both nodes would resume it.)
	if code, body := withCookie(t, "POST", b+"/v1/sessions/none/cancel", session, `{}`, hdr); code != http.StatusNotFound {
		t.Errorf("a write on node b with the cookie and csrf value of node a: %d %s, want 404 from the route", code, body)
	}
	if code, body := withCookie(t, "POST", b+"/v1/sessions/none/cancel", session, `{}`, map[string]string{node.CSRFHeader: csrf + "x"}); code != http.StatusForbidden {
		t.Errorf("a write on node b with another csrf value: %d %s, want 403", code, body)
	}
	if code, body := withCookie(t, "POST", b+"/v1/auth/logout", session, "", hdr); code != http.StatusNoContent {
		t.Fatalf("logout on node b: %d %s", code, body)
	}
	if code, _ := withCookie(t, "GET", b+"/v1/sessions", session, "", nil); code != http.StatusUnauthorized {
		t.Errorf("the cookie on node b after its logout there: %d, want 401", code)
	}
	waitFor(t, 10*time.Second, "the logout on node b to end the sign-in on node a", func() bool {
		code, _ := withCookie(t, "GET", a+"/v1/sessions", session, "", nil)
		return code == http.StatusUnauthorized
	})

	// A short sign-in on a third node: b takes it, until it expires.
	c, _ := startServed(t, cfg(2*time.Second))
	resp, body, cookies := login(t, c, goodToken, nil)
	var ans node.LoginAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || cookies[node.SessionCookie] == nil {
		t.Fatalf("login on node c: %d %s", resp.StatusCode, body)
	}
	short := cookies[node.SessionCookie].Value
	if code, body := withCookie(t, "GET", b+"/v1/sessions", short, "", nil); code != http.StatusOK && time.Now().Before(ans.ExpiresAt) {
		t.Fatalf("node c's sign-in on node b before it expires: %d %s, want 200", code, body)
	}
	time.Sleep(time.Until(ans.ExpiresAt) + 50*time.Millisecond)
	for name, base := range map[string]string{"b": b, "c": c, "a": a} {
		if code, _ := withCookie(t, "GET", base+"/v1/sessions", short, "", nil); code != http.StatusUnauthorized {
			t.Errorf("an expired sign-in on node %s: %d, want 401", name, code)
		}
	}

	// The log: neither the cookies nor the CSRF values nor the token, in any event.
	infos, err := log.Sessions(context.Background(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	tokenSum := sha256.Sum256([]byte(goodToken))
	secrets := map[string]string{"the first cookie": session, "the first csrf value": csrf, "the second cookie": short,
		"the second csrf value": ans.CSRF, "the token": goodToken, "the token's SHA-256": hex.EncodeToString(tokenSum[:])}
	signIns, signOuts := 0, 0
	for _, info := range infos {
		events, err := log.Read(context.Background(), info.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			raw, err := messages.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			for what, v := range secrets {
				if strings.Contains(string(raw), v) {
					t.Errorf("event %s seq %d (%s) holds %s: %s", e.SessionID, e.Seq, e.Type, what, raw)
				}
			}
			switch e.Type {
			case messages.TypeUISignedIn:
				signIns++
			case messages.TypeUISignedOut:
				signOuts++
			}
		}
	}
	if signIns != 2 || signOuts != 1 {
		t.Errorf("the log holds %d sign-ins and %d logouts, want 2 and 1", signIns, signOuts)
	}
	code, _, listed := doCall(t, "GET", a+"/v1/sessions", goodToken, "")
	var list []eventlog.SessionInfo
	if code != http.StatusOK || json.Unmarshal([]byte(listed), &list) != nil {
		t.Fatalf("GET /v1/sessions: %d %s", code, listed)
	}
	marked := 0
	for _, s := range list {
		if node.IsSignInStream(s.ID) {
			if s.Status != node.SignInStatus {
				t.Errorf("the sign-in stream %s is listed as %q, want %q", s.ID, s.Status, node.SignInStatus)
			}
			marked++
		}
	}
	if marked != 2 {
		t.Errorf("GET /v1/sessions lists %d sign-in streams, want 2: %s", marked, listed)
	}
}

// Behind a trusted proxy each client has its own login bucket, named by the
// rightmost untrusted address of X-Forwarded-For: one client past its limit does
// not lock out another, and a client that makes up the left part of the header
// stays limited. From an untrusted peer the header is ignored: a spoofed
// X-Forwarded-For does not escape the limit.
func TestLoginLimitPerClientBehindATrustedProxy(t *testing.T) {
	exhaust := func(base string, xff string) {
		t.Helper()
		for i := range 30 {
			resp, body, _ := login(t, base, wrongToken, map[string]string{"X-Forwarded-For": xff})
			if resp.StatusCode == http.StatusTooManyRequests {
				return
			}
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("wrong login %d from %s: %d %s", i, xff, resp.StatusCode, body)
			}
		}
		t.Fatalf("30 wrong logins from %s were never limited", xff)
	}
	// The test's client connects from loopback: here that is the trusted proxy.
	_, proxied, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}, TrustedProxies: []string{"127.0.0.0/8", "::1"}})
	exhaust(proxied, "198.51.100.1")
	if resp, body, _ := login(t, proxied, goodToken, map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.1"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the limited client with a made-up address before its own: %d %s, want 429", resp.StatusCode, body)
	}
	if resp, body, _ := login(t, proxied, goodToken, map[string]string{"X-Forwarded-For": "198.51.100.2"}); resp.StatusCode != http.StatusOK {
		t.Errorf("another client behind the proxy: %d %s, want 200", resp.StatusCode, body)
	}

	// Loopback is no trusted proxy here: the header is the client's own claim.
	_, direct, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}, TrustedProxies: []string{"10.0.0.0/8"}})
	exhaust(direct, "198.51.100.1")
	for _, xff := range []string{"198.51.100.2", "10.0.0.1", ""} {
		if resp, body, _ := login(t, direct, goodToken, map[string]string{"X-Forwarded-For": xff}); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a spoofed X-Forwarded-For %q from an untrusted peer: %d %s, want 429", xff, resp.StatusCode, body)
		}
	}
}

// Cookies a node does not hold are looked up in the log at most a burst at once
// per client address: a client that makes them up is answered 429 with
// Retry-After, not with a read of the log per request, while the bearer token and
// a held cookie still work.
func TestMadeUpCookiesAreLimitedPerClient(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	session, _ := signIn(t, base)
	var limited http.Header
	for i := range 100 {
		made := strings.Repeat("A", 40) + string(rune('A'+i/26%26)) + string(rune('a'+i%26)) + "x"
		code, hdr, body := rawCall(t, "GET", base+"/v1/sessions", "", map[string]string{"Cookie": node.SessionCookie + "=" + made})
		if code == http.StatusTooManyRequests {
			limited = hdr
			if i < 10 {
				t.Errorf("limited after %d made-up cookies", i)
			}
			break
		}
		if code != http.StatusUnauthorized {
			t.Fatalf("made-up cookie %d: %d %s, want 401", i, code, body)
		}
	}
	if limited == nil || limited.Get("Retry-After") == "" {
		t.Fatalf("100 made-up cookies from one address were never limited")
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", session, "", nil); code != http.StatusOK {
		t.Errorf("a held cookie from the limited address: %d, want 200", code)
	}
	if code, _, body := doCall(t, "GET", base+"/v1/sessions", goodToken, ""); code != http.StatusOK {
		t.Errorf("the bearer token from the limited address: %d %s", code, body)
	}
}
