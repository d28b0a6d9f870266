package node_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/redact"
)

const (
	goodToken  = "tok-0123456789abcdef-good"
	otherToken = "tok-fedcba9876543210-other"
	wrongToken = "tok-0123456789abcdef-gooD"
)

// syncBuf is a log buffer safe for the handlers' goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// authNode starts a node with memory, knowledge bases and cfg.HTTP, serves its
// Handler (with a route added by Handle, as node serve adds /mcp) on a loopback
// port, and returns it with its base URL and its debug log.
func authNode(t *testing.T, httpCfg node.HTTPConfig) (*node.Node, string, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	n := nodetest.Start(t, node.Config{HTTP: httpCfg, Memory: &memory.Config{}, Knowledge: &knowledge.Config{},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	n.Handle("/extra", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		fmt.Fprintf(w, "%d", len(body))
	}))
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	return n, srv.URL, logs
}

// doCall makes a request with the bearer token (none when empty) and returns the
// answer's status, headers and body; a stream is read only to its headers.
func doCall(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	var hdr map[string]string
	if token != "" {
		hdr = map[string]string{"Authorization": "Bearer " + token}
	}
	return rawCall(t, method, url, body, hdr)
}

// rawCall makes a request with these headers (Content-Type application/json for a
// body unless they say another) and returns the answer's status, headers and body;
// a stream is read only to its headers.
func rawCall(t *testing.T, method, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	return callWith(t, method+" "+url, method, url, body, func(req *http.Request) {
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
	})
}

// callWith makes a request (Content-Type application/json for a body) that prepare
// may change before it is sent, and returns the answer's status, headers and
// body; a stream is read only to its headers. what names the request when it
// fails.
func callWith(t *testing.T, what, method, url, body string, prepare func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	prepare(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, resp.Header, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// routeCase is how the test calls one route with the right token, and what it
// answers then.
type routeCase struct {
	path, body string
	want       int
}

// routeCases has a case for every route of the node authNode starts: a route the
// table gains without a case here fails TestEveryRouteNeedsTheToken.
var routeCases = map[string]routeCase{
	"POST /v1/tasks":                             {"/v1/tasks", `{"input":"hello","session_id":"s2"}`, http.StatusAccepted},
	"GET /v1/sessions":                           {"/v1/sessions", "", http.StatusOK},
	"GET /v1/sessions/{id}":                      {"/v1/sessions/s1", "", http.StatusOK},
	"GET /v1/sessions/{id}/events":               {"/v1/sessions/s1/events", "", http.StatusOK},
	"GET /v1/sessions/{id}/stream":               {"/v1/sessions/s1/stream", "", http.StatusOK},
	"GET /v1/feed/sessions":                      {"/v1/feed/sessions", "", http.StatusOK},
	"POST /v1/sessions/{id}/cancel":              {"/v1/sessions/s1/cancel", `{}`, http.StatusConflict},
	"POST /v1/sessions/{id}/approvals/{call}":    {"/v1/sessions/s1/approvals/c1", `{"approve":true}`, http.StatusConflict},
	"GET /v1/approvals":                          {"/v1/approvals", "", http.StatusOK},
	"GET /metrics":                               {"/metrics", "", http.StatusOK},
	"GET /healthz":                               {"/healthz", "", http.StatusOK},
	"GET /livez":                                 {"/livez", "", http.StatusOK},
	"GET /openapi.json":                          {"/openapi.json", "", http.StatusOK},
	"POST /v1/memories":                          {"/v1/memories", `{"namespace":"ns","tier":"semantic","content":"the sky is blue"}`, http.StatusCreated},
	"GET /v1/memories/search":                    {"/v1/memories/search?namespace=ns&q=sky", "", http.StatusOK},
	"GET /v1/memories/{id}/history":              {"/v1/memories/m-none/history", "", http.StatusNotFound},
	"GET /v1/kb":                                 {"/v1/kb", "", http.StatusOK},
	"GET /v1/kb/{name}/documents":                {"/v1/kb/docs/documents", "", http.StatusOK},
	"POST /v1/kb/{name}/documents":               {"/v1/kb/docs/documents", `{"source":"a.md","content":"# A\n\nalpha"}`, http.StatusOK},
	"GET /v1/kb/{name}/search":                   {"/v1/kb/docs/search?q=alpha", "", http.StatusOK},
	"POST /v1/kb/{name}/ask":                     {"/v1/kb/docs/ask", `{"question":"what is alpha?"}`, http.StatusOK},
	"DELETE /v1/kb/{name}/documents/{source...}": {"/v1/kb/docs/documents/b.md", "", http.StatusOK},
	"DELETE /v1/kb/{name}/documents":             {"/v1/kb/docs/documents?source=c.md", "", http.StatusOK},
	"GET /v1/stats":                              {"/v1/stats", "", http.StatusOK},
	"GET /ui/":                                   {"/ui/", "", http.StatusOK},
	"GET /ui":                                    {"/ui", "", http.StatusOK}, // a redirect to /ui/, followed with the token
	"/extra":                                     {"/extra", `{"x":1}`, http.StatusOK},
	"POST /v1/auth/login":                        {"/v1/auth/login", `{"token":"` + goodToken + `"}`, http.StatusOK},
	"POST /v1/auth/logout":                       {"/v1/auth/logout", "", http.StatusNoContent},
}

// With tokens, every route but the public ones answers 401 (WWW-Authenticate:
// Bearer, a JSON error) without a token and with a wrong one, and its own answer
// with a right one; the public /healthz answers without a token.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken, otherToken}}})
	nodetest.Run(t, n, "s1", "hello")
	for _, src := range []string{"a.md", "b.md", "c.md"} {
		if code, _, body := doCall(t, "POST", base+"/v1/kb/docs/documents", goodToken, `{"source":"`+src+`","content":"# A\n\nalpha"}`); code != http.StatusCreated {
			t.Fatalf("adding %s: %d %s", src, code, body)
		}
	}
	seen := map[string]bool{}
	for _, r := range n.Routes() {
		c, ok := routeCases[r.Pattern()]
		if !ok {
			t.Errorf("route %q has no case in routeCases: add how to call it", r.Pattern())
			continue
		}
		seen[r.Pattern()] = true
		method := cmpOr(r.Method, "POST")
		public := slices.Contains(node.PublicPaths, r.Path)
		for _, tok := range []string{"", wrongToken} {
			code, h, body := doCall(t, method, base+c.path, tok, c.body)
			if public {
				if code != c.want {
					t.Errorf("%s %s (public) with token %q: %d %s, want %d", method, c.path, tok, code, body, c.want)
				}
				continue
			}
			var e struct{ Error string }
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
				t.Errorf("%s %s with token %q: %d (WWW-Authenticate %q) %s, want 401 with WWW-Authenticate: Bearer and a JSON error",
					method, c.path, tok, code, h.Get("WWW-Authenticate"), body)
			}
		}
		code, hdr, body := doCall(t, method, base+c.path, goodToken, c.body)
		if code != c.want {
			t.Errorf("%s %s with the right token: %d %s, want %d", method, c.path, code, body, c.want)
		}
		if code == http.StatusOK && r.Path != "/extra" && r.Path != "/metrics" && !strings.HasPrefix(r.Path, "/ui") && hdr.Get("Content-Type") != "text/event-stream" && !json.Valid([]byte(body)) {
			t.Errorf("%s %s: the answer is not JSON: %s", method, c.path, body)
		}
	}
	for p := range routeCases {
		if !seen[p] {
			t.Errorf("routeCases has %q, which is no route of the node", p)
		}
	}
	// Either token works; an unknown path is 401 too (the routes are not probed).
	if code, _, body := doCall(t, "GET", base+"/v1/sessions", otherToken, ""); code != http.StatusOK {
		t.Errorf("the second token: %d %s", code, body)
	}
	if code, _, _ := doCall(t, "GET", base+"/nowhere", "", ""); code != http.StatusUnauthorized {
		t.Errorf("an unknown path without a token: %d, want 401", code)
	}
	// Schemes are case-insensitive; anything but Bearer is refused.
	for auth, want := range map[string]int{"bearer " + goodToken: 200, "Basic " + goodToken: 401, goodToken: 401, "Bearer": 401} {
		req, _ := http.NewRequest("GET", base+"/v1/sessions", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", strings.ReplaceAll(auth, goodToken, "TOKEN"), resp.StatusCode, want)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Without tokens the API is open, as before.
func TestWithoutTokensTheAPIIsOpen(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{})
	for _, p := range []string{"/v1/sessions", "/metrics", "/openapi.json", "/healthz"} {
		if code, _, body := doCall(t, "GET", base+p, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", p, code, body)
		}
	}
}

// No token reaches the log: not the right one, not a wrong one, not those of a
// tokens file, not in a refused reload.
func TestTokensNeverReachTheLog(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	fileToken := "tok-from-the-file-0123456789"
	if err := os.WriteFile(file, []byte("# ops\n"+fileToken+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, base, logs := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}, TokensFile: file, Rate: 1000}})
	for _, tok := range []string{goodToken, wrongToken, fileToken, ""} {
		for _, p := range []string{"/v1/sessions", "/v1/tasks", "/nowhere", "/metrics"} {
			_, _, body := doCall(t, "GET", base+p, tok, "")
			if tok != "" && strings.Contains(body, tok) {
				t.Errorf("GET %s: the answer has the token: %s", p, body)
			}
		}
	}
	_, _, body := doCall(t, "POST", base+"/v1/tasks", fileToken, `{"input":"hello","session_id":"s9"}`)
	if strings.Contains(body, fileToken) {
		t.Errorf("the answer has the token: %s", body)
	}
	// A reload of a file with a bad token fails without quoting it.
	bad := "short"
	if err := os.WriteFile(file, []byte(goodToken+"\n"+bad+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := n.ReloadTokens()
	if err == nil || strings.Contains(err.Error(), bad+"\"") || strings.Contains(err.Error(), goodToken) {
		t.Errorf("reloading a file with a short token: %v", err)
	}
	if !strings.Contains(logs.String(), "http request refused") {
		t.Errorf("the refusals are not logged:\n%s", logs.String())
	}
	if _, _, metrics := doCall(t, "GET", base+"/metrics", goodToken, ""); !strings.Contains(metrics, `troupe_http_refused_total{code="401"}`) {
		t.Errorf("no refusal counted in /metrics")
	}
	for _, tok := range []string{goodToken, wrongToken, fileToken} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("the log has a token:\n%s", logs.String())
		}
	}
	if err := (node.AuthConfig{Tokens: []string{"tok with space 0123456789"}}).Validate(); err == nil || strings.Contains(err.Error(), "tok with") {
		t.Errorf("validating a token with a space: %v", err)
	}
}

// SIGHUP's ReloadTokens takes the file's new tokens and drops its old ones; an
// emptied file leaves the tokens as they were.
func TestReloadTokensReadsTheFileAgain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{TokensFile: file}})
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", goodToken, ""); code != 200 {
		t.Fatalf("the file's token: %d", code)
	}
	if err := os.WriteFile(file, []byte("# rotated\n"+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", goodToken, ""); code != 401 {
		t.Errorf("the old token after the reload: %d, want 401", code)
	}
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", otherToken, ""); code != 200 {
		t.Errorf("the new token after the reload: %d, want 200", code)
	}
	if err := os.WriteFile(file, []byte("# nobody\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadTokens(); err == nil {
		t.Error("reloading an emptied file: no error")
	}
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", "", ""); code != 401 {
		t.Errorf("after an emptied file, no token: %d, want 401 (the API stays closed)", code)
	}
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", otherToken, ""); code != 200 {
		t.Errorf("after an emptied file, the last token: %d, want 200", code)
	}
}

// A token added to the tokens file and taken by ReloadTokens (node serve's SIGHUP)
// is a secret as those read at start are: a task that holds it is recorded without
// it, and the node's Redactor (the one its log handler holds) replaces it. A token
// the reload dropped stays a secret: it may still leak.
func TestReloadedTokensAreRedacted(t *testing.T) {
	const startToken, addedToken = "tok-at-start-0123456789", "tok-added-on-reload-9876543210"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(startToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	red := redact.New()
	logs := &syncBuf{}
	n := nodetest.Start(t, node.Config{HTTP: node.HTTPConfig{Auth: node.AuthConfig{TokensFile: file}}, Redactor: red,
		Logger: slog.New(redact.NewHandler(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}), red))})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	if err := os.WriteFile(file, []byte("# rotated\n"+addedToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := doCall(t, "GET", srv.URL+"/v1/sessions", addedToken, ""); code != 200 {
		t.Fatalf("the added token: %d", code)
	}
	events := nodetest.Run(t, n, "s-reloaded", "echo the tokens "+addedToken+" and "+startToken)
	if len(events) == 0 {
		t.Fatal("no events")
	}
	for _, e := range events {
		for _, tok := range []string{addedToken, startToken} {
			if bytes.Contains(e.Payload, []byte(tok)) {
				t.Errorf("event %d (%s) holds the token %s: %s", e.Seq, e.Type, tok, e.Payload)
			}
		}
	}
	_, _, body := doCall(t, "GET", srv.URL+"/v1/sessions/s-reloaded", addedToken, "")
	slog.New(redact.NewHandler(slog.NewTextHandler(logs, nil), red)).Info("a line that names " + addedToken + " and " + startToken)
	for _, tok := range []string{addedToken, startToken} {
		if strings.Contains(body, tok) || strings.Contains(logs.String(), tok) {
			t.Errorf("the answer or the log holds the token %s:\n%s\n%s", tok, body, logs.String())
		}
	}
	if !strings.Contains(body, redact.Redacted) {
		t.Errorf("the session's input should show the tokens redacted: %s", body)
	}
}

// Past its burst a token is answered 429 with Retry-After (whole seconds) and a
// JSON error, another token is not, and the token is served again once its bucket
// refills. Without tokens the limit is per client IP.
func TestRateLimitAnswers429ThenRecovers(t *testing.T) {
	for _, tokens := range [][]string{{goodToken, otherToken}, nil} {
		_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: tokens, Rate: 2, Burst: 3}})
		tok := ""
		if tokens != nil {
			tok = goodToken
		}
		var code int
		var h http.Header
		var body string
		for range 3 {
			if code, _, body = doCall(t, "GET", base+"/v1/sessions", tok, ""); code != 200 {
				t.Fatalf("within the burst: %d %s", code, body)
			}
		}
		code, h, body = doCall(t, "GET", base+"/v1/sessions", tok, "")
		var e struct{ Error string }
		secs, err := strconv.Atoi(h.Get("Retry-After"))
		if code != http.StatusTooManyRequests || err != nil || secs < 1 || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Fatalf("past the burst (tokens %v): %d Retry-After %q %s, want 429 with whole seconds and a JSON error", tokens != nil, code, h.Get("Retry-After"), body)
		}
		if code, _, _ := doCall(t, "GET", base+"/healthz", tok, ""); code != 200 {
			t.Errorf("/healthz past the limit: %d, want 200 (probes are not limited)", code)
		}
		if tokens != nil {
			if code, _, _ := doCall(t, "GET", base+"/v1/sessions", otherToken, ""); code != 200 {
				t.Errorf("another token while the first is limited: %d", code)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if code, _, _ = doCall(t, "GET", base+"/v1/sessions", tok, ""); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %d 10 s after the limit", code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// A body over the bound is 413 with a JSON error: on POST /v1/tasks (its own 2 MiB
// bound), and on a route without its own, whose bound is HTTPConfig.MaxBody, when
// its Content-Length says so; read chunked, the route's read fails at the bound.
func TestOversizedBodiesAre413(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{MaxBody: 1000})
	big := `{"input":"` + strings.Repeat("a", 3<<20) + `"}`
	code, _, body := doCall(t, "POST", base+"/v1/tasks", "", big)
	var e struct{ Error string }
	if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		t.Errorf("a 3 MiB task: %d %s, want 413 with a JSON error", code, body)
	}
	code, _, body = doCall(t, "POST", base+"/v1/sessions/s1/approvals/c1", "", `{"approve":true,"reason":"`+strings.Repeat("r", 100<<10)+`"}`)
	if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		t.Errorf("a 100 KB approval: %d %s, want 413 with a JSON error", code, body)
	}
	code, _, body = doCall(t, "POST", base+"/extra", "", `{"x":"`+strings.Repeat("b", 2000)+`"}`)
	if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "larger than 1000") {
		t.Errorf("2 KB to a route bound at 1000 bytes: %d %s, want 413 with a JSON error", code, body)
	}
	if code, _, body := doCall(t, "POST", base+"/extra", "", `{"x":"small"}`); code != 200 {
		t.Errorf("a small body: %d %s", code, body)
	}
	// Chunked: no Content-Length; the handler's read stops at the bound.
	req, _ := http.NewRequest("POST", base+"/extra", io.MultiReader(strings.NewReader(strings.Repeat("c", 5000))))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("5000 chunked bytes to a route bound at 1000: %d, want the route's 413", resp.StatusCode)
	}
}

// CORS is off unless origins are configured; then a listed origin's preflight is
// answered with the methods and headers, another origin's is refused, and no
// answer allows every origin.
func TestCORSPreflight(t *testing.T) {
	preflight := func(base, origin string) *http.Response {
		req, _ := http.NewRequest("OPTIONS", base+"/v1/tasks", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}},
		CORS: node.CORSConfig{Origins: []string{"https://app.example"}}})
	resp := preflight(base, "https://app.example")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("an allowed origin's preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp = preflight(base, "https://evil.example")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin's preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// The actual request: the allowed origin is named, never "*", and credentials are not allowed.
	req, _ := http.NewRequest("GET", base+"/v1/sessions", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Authorization", "Bearer "+goodToken)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 || r2.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || r2.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("an allowed origin's request: %d %v", r2.StatusCode, r2.Header)
	}
	// Without origins configured: no CORS answer at all.
	_, open, _ := authNode(t, node.HTTPConfig{})
	resp = preflight(open, "https://app.example")
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS without origins configured: %v", resp.Header)
	}
	for _, o := range []string{"*", "app.example", "https://app.example/path", "null"} {
		if err := (node.CORSConfig{Origins: []string{o}}).Validate(); err == nil {
			t.Errorf("origin %q: valid, want an error", o)
		}
	}
}

// A client that trickles its request headers, a byte at a time, is cut at the read
// header timeout; a Go http.Client with its defaults and a raw HTTP/1.1 request as
// curl sends it are served.
func TestSlowHeadersAreCutAndPlainClientsWork(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{ReadHeaderTimeout: 300 * time.Millisecond,
		Auth: node.AuthConfig{Tokens: []string{goodToken}}}})
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	_, _ = io.WriteString(c, "GET /v1/sessions HTTP/1.1\r\nHost: node\r\n")
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
trickle:
	for {
		select {
		case <-closed:
			break trickle
		case <-tick.C:
			_, _ = io.WriteString(c, "X")
		case <-deadline:
			t.Fatal("a client trickling its headers was not cut within 20 s")
		}
	}

	req, _ := http.NewRequest("GET", base+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("http.DefaultClient: %d", resp.StatusCode)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(raw, "GET /v1/sessions HTTP/1.1\r\nHost: %s\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nAuthorization: Bearer %s\r\n\r\n", addr, goodToken)
	rr, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	rr.Body.Close()
	if rr.StatusCode != 200 {
		t.Errorf("a raw curl-like request: %d", rr.StatusCode)
	}
}

// The HTTP configuration's limits are checked.
func TestHTTPConfigValidate(t *testing.T) {
	for _, c := range []node.HTTPConfig{
		{MaxBody: -1},
		{Auth: node.AuthConfig{Rate: -1}},
		{Auth: node.AuthConfig{Burst: -1}},
		{Auth: node.AuthConfig{Tokens: []string{"short"}}},
	} {
		if err := (node.Config{HTTP: c}).Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", c)
		}
	}
	if _, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), HTTP: node.HTTPConfig{Auth: node.AuthConfig{TokensFile: filepath.Join(t.TempDir(), "none")}}}); err == nil {
		t.Error("a node with a missing tokens file: no error")
	}
}

// A page of another site cannot change anything on a node, open or not: a form
// posted across sites (Sec-Fetch-Site cross-site, or an Origin that is not the
// node's) is refused before its route, and nothing is submitted; the node's own
// pages, a configured CORS origin and clients that are not browsers (no such
// headers) go through.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	send := func(base, method, path, ctype, body string, hdr map[string]string) (int, string) {
		h := map[string]string{}
		if ctype != "" {
			h["Content-Type"] = ctype
		}
		for k, v := range hdr {
			h[k] = v
		}
		code, _, b := rawCall(t, method, base+path, body, h)
		return code, b
	}
	_, base, _ := authNode(t, node.HTTPConfig{CORS: node.CORSConfig{Origins: []string{"https://app.example"}}})
	task := `{"session_id":"xs","input":"2+2"}`
	for _, c := range []struct {
		what, method, path, ctype, body string
		hdr                             map[string]string
	}{
		{"a text/plain form posting a task", "POST", "/v1/tasks", "text/plain", task, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}},
		{"a fetch from a sibling site", "POST", "/v1/tasks", "application/json", task, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "https://evil.localhost"}},
		{"an old browser's form, Origin only", "POST", "/v1/tasks", "application/x-www-form-urlencoded", "a=b", map[string]string{"Origin": "https://evil.example"}},
		{"a cancel", "POST", "/v1/sessions/xs/cancel", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"a multipart upload to a knowledge base", "POST", "/v1/kb/docs/documents", "multipart/form-data; boundary=x", "--x--", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"a deletion", "DELETE", "/v1/kb/docs/documents/a.md", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"an MCP call", "POST", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if code, body := send(base, c.method, c.path, c.ctype, c.body, c.hdr); code != http.StatusForbidden || !strings.Contains(body, "another site") {
			t.Errorf("%s: %d %s; want 403", c.what, code, body)
		}
	}
	if code, body := send(base, "GET", "/v1/sessions", "", "", nil); code != http.StatusOK || strings.Contains(body, `"xs"`) {
		t.Fatalf("after the refused writes: %d %s", code, body)
	}
	for _, c := range []struct {
		what string
		hdr  map[string]string
	}{
		{"a client that is not a browser", nil},
		{"the node's own page", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": base}},
		{"the configured CORS origin", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example"}},
	} {
		if code, body := send(base, "POST", "/v1/tasks", "application/json", `{"session_id":"ok-`+strconv.Itoa(len(c.what))+`","input":"2+2"}`, c.hdr); code != http.StatusAccepted && code != http.StatusOK {
			t.Errorf("%s: %d %s; want the task accepted", c.what, code, body)
		}
	}
	// Reads stay open to any page (browsers keep their answers from it without CORS).
	if code, _ := send(base, "GET", "/v1/sessions", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusOK {
		t.Errorf("a cross-site read: %d", code)
	}
}
