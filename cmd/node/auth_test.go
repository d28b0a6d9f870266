package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/node"
)

const serveToken = "tok-serve-0123456789abcdef"

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// get answers the status of a request to url with token (none when empty).
func get(t *testing.T, method, url, token, body string) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// node serve --auth-token closes every route but /healthz, /mcp and /metrics
// included: an MCP client with the token works, one without is refused; the
// OpenAPI document names /mcp; the token never reaches the log.
func TestServeAuthTokenClosesEveryRoute(t *testing.T) {
	clearLLMEnv(t)
	base, logs := serveNodeLog(t, options{}, "--auth-token", serveToken, "-v")
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/metrics", ""}, {"POST", "/mcp", initialize}, {"GET", "/v1/sessions", ""}, {"GET", "/openapi.json", ""},
		{"POST", "/v1/tasks", `{"input":"hi"}`}, {"GET", "/v1/kb", ""}, {"GET", "/v1/mcp/servers", ""},
	} {
		if code := get(t, c.method, base+c.path, "", c.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", c.method, c.path, code)
		}
		if code := get(t, c.method, base+c.path, "tok-serve-0123456789abcdeX", c.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", c.method, c.path, code)
		}
		if code := get(t, c.method, base+c.path, serveToken, c.body); code >= 300 {
			t.Errorf("%s %s with the token: %d", c.method, c.path, code)
		}
	}
	if code := get(t, "GET", base+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: bearer{serveToken, http.DefaultTransport}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: client}, nil)
	if err != nil {
		t.Fatalf("an MCP client with the token: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list with the token: %v", err)
	}
	cs.Close()
	if _, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: base + "/mcp"}, nil); err == nil {
		t.Error("an MCP client without the token connected")
	}
	req, _ := http.NewRequest("GET", base+"/openapi.json", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || doc.Paths["/mcp"]["post"] == nil || doc.Paths["/v1/kb/{name}/ask"]["post"] == nil {
		t.Errorf("the OpenAPI document lacks /mcp or the knowledge bases (err %v): %v", err, doc.Paths)
	}
	if strings.Contains(logs.String(), serveToken) {
		t.Fatalf("the token is in the log:\n%s", logs.String())
	}
}

// The tokens and limits come from the environment and the configuration file too,
// and a bad token in the file is refused at start without being quoted.
func TestServeAuthFromEnvironmentAndConfig(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_AUTH_TOKENS", serveToken+", tok-second-0123456789abcdef")
	base := serveNode(t, options{})
	if code := get(t, "GET", base+"/v1/sessions", "", ""); code != 401 {
		t.Errorf("TROUPE_AUTH_TOKENS, no token: %d, want 401", code)
	}
	if code := get(t, "GET", base+"/v1/sessions", "tok-second-0123456789abcdef", ""); code != 200 {
		t.Errorf("TROUPE_AUTH_TOKENS, the second token: %d, want 200", code)
	}
	t.Setenv("TROUPE_AUTH_TOKENS", "")

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# the ops team\n"+serveToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(cfg, []byte(`{"auth": {"tokens_file": "`+tokens+`", "rate": 1, "burst": 2},
		"cors": {"origins": ["https://app.example"]}, "http_limits": {"max_body": 2048, "read_header_timeout": "5s"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base = serveNode(t, options{}, "--config", cfg)
	if code := get(t, "GET", base+"/v1/sessions", "", ""); code != 401 {
		t.Errorf("tokens file, no token: %d, want 401", code)
	}
	codes := []int{}
	for range 3 {
		codes = append(codes, get(t, "GET", base+"/v1/sessions", serveToken, ""))
	}
	if codes[0] != 200 || codes[2] != http.StatusTooManyRequests {
		t.Errorf("rate 1, burst 2: %v, want 200 first and 429 third", codes)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"auth": {"tokens": ["hunter2"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", bad, "--data", t.TempDir()}, io.Discard, &stderr, options{})
	if code != 2 || !strings.Contains(stderr.String(), "auth") || strings.Contains(stderr.String(), "hunter2") {
		t.Errorf("a short token in the configuration: exit %d, %s", code, stderr.String())
	}
	stderr.Reset()
	code = run(context.Background(), []string{"serve", "--cors-origin", "*", "--data", t.TempDir()}, io.Discard, &stderr, options{})
	if code != 2 || !strings.Contains(stderr.String(), "cors origin") {
		t.Errorf("--cors-origin '*': exit %d, %s", code, stderr.String())
	}
}

// node serve warns when it listens beyond loopback without tokens, not on
// loopback, and not with tokens.
func TestServeWarnsWhenOpenBeyondLoopback(t *testing.T) {
	clearLLMEnv(t)
	const warning = "without authentication"
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--http", "0.0.0.0:0"}, true},
		{[]string{"--http", "127.0.0.1:0"}, false},
		{[]string{"--http", "0.0.0.0:0", "--auth-token", serveToken}, false},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		logs := &syncBuffer{}
		exited := make(chan int, 1)
		go func() {
			exited <- run(ctx, append([]string{"serve", "--model", "offline", "--data", t.TempDir()}, c.args...), io.Discard, logs, options{})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(logs.String(), "node serving") {
			if time.Now().After(deadline) {
				t.Fatalf("%v: node serve did not start in 30 s:\n%s", c.args, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatal("node serve did not stop in 30 s")
		}
		if got := strings.Contains(logs.String(), warning); got != c.warn {
			t.Errorf("%v: warned %v, want %v:\n%s", c.args, got, c.warn, logs.String())
		}
		if strings.Contains(logs.String(), serveToken) {
			t.Errorf("%v: the token is in the log", c.args)
		}
	}
}

// The trusted proxies come from --trusted-proxy, else TROUPE_TRUSTED_PROXIES, else
// the file; a value that is no address nor CIDR prefix is refused.
func TestTrustedProxiesFromFlagsEnvironmentAndFile(t *testing.T) {
	file := node.HTTPConfig{TrustedProxies: []string{"10.0.0.0/8"}}
	t.Setenv("TROUPE_TRUSTED_PROXIES", "")
	for _, c := range []struct {
		env   string
		flags []string
		want  string
	}{
		{"", nil, "10.0.0.0/8"},
		{"192.0.2.0/24, fd00::/8", nil, "192.0.2.0/24|fd00::/8"},
		{"192.0.2.0/24", []string{"198.51.100.7"}, "198.51.100.7"},
	} {
		t.Setenv("TROUPE_TRUSTED_PROXIES", c.env)
		got, err := httpConfig(file, nil, nil, c.flags, "", 0, 0, 0, false)
		if err != nil || strings.Join(got.TrustedProxies, "|") != c.want {
			t.Errorf("env %q, flags %q: %q, %v; want %s", c.env, c.flags, got.TrustedProxies, err, c.want)
		}
	}
	if _, err := httpConfig(file, nil, nil, []string{"10.0.0.300"}, "", 0, 0, 0, false); err == nil || !strings.Contains(err.Error(), "trusted proxy") {
		t.Errorf("a bad --trusted-proxy: %v", err)
	}
}

// The gate's refusals of /mcp (401, 429) are JSON-RPC errors, with the status and
// headers of the API's refusals: the MCP Python SDK shows the message of such a
// body, and said only "Server returned an error response" of the API's {"error"},
// so that a user with no token, or a wrong one, or past the rate, did not learn
// which. The other routes keep {"error"}.
func TestServeAuthRefusalsOfMCPAreJSONRPC(t *testing.T) {
	clearLLMEnv(t)
	base := serveNode(t, options{}, "--auth-token", serveToken, "--http-rate", "0.01", "--http-burst", "1")
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(path, token string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	type rpcError struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	for _, c := range []struct {
		token, status, auth, says string
	}{
		{"", "401", `Bearer realm="troupe"`, "needs a bearer token"},
		{"tok-serve-0123456789abcdeX", "401", `Bearer realm="troupe", error="invalid_token"`, "not one of this node's"},
		{serveToken, "200", "", ""},
		{serveToken, "429", "", "too many requests"}, // the burst of one is spent
	} {
		resp, body := post("/mcp", c.token)
		if got := strconv.Itoa(resp.StatusCode); got != c.status {
			t.Errorf("/mcp with token %q: %s %q, want %s", c.token, resp.Status, body, c.status)
			continue
		}
		if c.says == "" {
			continue
		}
		var e rpcError
		if err := json.Unmarshal(body, &e); err != nil || e.JSONRPC != "2.0" || string(e.ID) != "null" || e.Error.Code != -32600 ||
			!strings.Contains(e.Error.Message, c.says) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("/mcp with token %q: %s %s %q, want a JSON-RPC error that says %q", c.token, resp.Status, resp.Header.Get("Content-Type"), body, c.says)
		}
		if got := resp.Header.Get("WWW-Authenticate"); got != c.auth {
			t.Errorf("/mcp with token %q: WWW-Authenticate %q, want %q", c.token, got, c.auth)
		}
		if c.status == "429" && resp.Header.Get("Retry-After") == "" {
			t.Errorf("/mcp past the rate: no Retry-After")
		}
	}
	resp, body := post("/v1/tasks", "")
	var apiErr struct{ Error string }
	if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &apiErr) != nil || !strings.Contains(apiErr.Error, "needs a bearer token") {
		t.Errorf("/v1/tasks without a token: %s %q, want 401 and the API's {\"error\"}", resp.Status, body)
	}

	// The official Python SDK, with its defaults, shows why.
	for token, says := range map[string]string{"": "needs a bearer token", "tok-serve-0123456789abcdeX": "not one of this node's"} {
		var out struct {
			Tools []string
			Error struct{ Message string }
		}
		sdkClient(t, "py", base+"/mcp", "token", nil, &out, token)
		if !strings.Contains(out.Error.Message, says) {
			t.Errorf("the Python SDK with token %q: %+v, want an error that says %q", token, out, says)
		}
	}
}
