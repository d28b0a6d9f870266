package mcp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/mcp/mcptest"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
)

// oauthServer is an MCP server behind a bearer token, and the authorization server
// that gives it (one httptest server for both): the authorization endpoint
// redirects at once with a code, as one that approves a known client without a
// person does, unless needsPerson, when it shows a login page.
type oauthServer struct {
	*httptest.Server
	needsPerson bool
	authorized  atomic.Int32 // codes given
	tokens      atomic.Int32 // tokens given
}

func newOAuthServer(t *testing.T, needsPerson bool) *oauthServer {
	t.Helper()
	o := &oauthServer{needsPerson: needsPerson}
	mux := http.NewServeMux()
	o.Server = httptest.NewServer(mux)
	t.Cleanup(o.Close)
	mcpSrv := sdk.NewServer(&sdk.Implementation{Name: "guarded", Version: "1"}, nil)
	sdk.AddTool(mcpSrv, &sdk.Tool{Name: "secret"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "42"}}}, nil, nil
	})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token != "token-for-node" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Scopes: []string{"tools"}, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: o.URL + "/.well-known/oauth-protected-resource/mcp"})(
		sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpSrv }, nil)))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: o.URL + "/mcp", AuthorizationServers: []string{o.URL}, ScopesSupported: []string{"tools"}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": o.URL, "authorization_endpoint": o.URL + "/authorize",
			"token_endpoint": o.URL + "/token", "response_types_supported": []string{"code"},
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"client_secret_post"}})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if o.needsPerson {
			_, _ = w.Write([]byte("<html>log in</html>"))
			return
		}
		if q.Get("client_id") != "node" || q.Get("code_challenge_method") != "S256" || q.Get("scope") != "tools" {
			http.Error(w, "bad authorization request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		o.authorized.Add(1)
		to, _ := url.Parse(q.Get("redirect_uri"))
		to.RawQuery = url.Values{"code": {"the-code"}, "state": {q.Get("state")}}.Encode()
		// Through a page of the authorization server's own, as a real one may.
		http.Redirect(w, r, "/consented?next="+url.QueryEscape(to.String()), http.StatusFound)
	})
	mux.HandleFunc("/consented", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("next"), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("code") != "the-code" || r.PostFormValue("code_verifier") == "" || r.PostFormValue("client_secret") != "s3cret" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		o.tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"token-for-node","token_type":"Bearer","expires_in":3600,"scope":"tools"}`))
	})
	return o
}

func runClient(t *testing.T, servers map[string]mcp.ServerConfig) (*mcp.Client, context.Context) {
	t.Helper()
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: servers, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { c.Close(); <-done; cancel() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c, ctx
}

// A pre-registered client authorizes headless: the client follows the
// authorization server's redirects to the redirect URL, takes the code, and calls
// the guarded server's tools with the token.
func TestOAuthHeadless(t *testing.T) {
	o := newOAuthServer(t, false)
	t.Setenv("TEST_OAUTH_SECRET", "s3cret")
	c, ctx := runClient(t, map[string]mcp.ServerConfig{"guarded": {URL: o.URL + "/mcp",
		OAuth: &mcp.OAuthConfig{ClientID: "node", ClientSecretEnv: "TEST_OAUTH_SECRET", RedirectURL: "http://127.0.0.1:9/callback"}}})
	if st := c.Status()[0]; st.State != mcp.StateConnected {
		t.Fatalf("status = %+v", st)
	}
	tl, ok := c.Tool("guarded__secret")
	if !ok {
		t.Fatalf("catalog = %v", c.Specs())
	}
	if out, err := tl.Call(ctx, tools.Call{Key: "s/1", Arguments: `{}`}); err != nil || out != "42" {
		t.Errorf("call = %q, %v", out, err)
	}
	if o.authorized.Load() != 1 || o.tokens.Load() != 1 {
		t.Errorf("authorizations = %d, tokens = %d, want 1 and 1", o.authorized.Load(), o.tokens.Load())
	}
}

// An authorization server that shows a login page fails the connection with
// ErrAuthorizationNeedsPerson, naming the server.
func TestOAuthNeedsPerson(t *testing.T) {
	o := newOAuthServer(t, true)
	t.Setenv("TEST_OAUTH_SECRET", "s3cret")
	c, _ := runClient(t, map[string]mcp.ServerConfig{"guarded": {URL: o.URL + "/mcp",
		OAuth: &mcp.OAuthConfig{ClientID: "node", ClientSecretEnv: "TEST_OAUTH_SECRET", RedirectURL: "http://127.0.0.1:9/callback"}}})
	st := c.Status()[0]
	if st.State != mcp.StateDown || !strings.Contains(st.Error, mcp.ErrAuthorizationNeedsPerson.Error()) || !strings.Contains(st.Error, `"guarded"`) {
		t.Fatalf("status = %+v", st)
	}
}

// The "oauth" and "elicitation" fields are checked, each error naming its field.
func TestOAuthConfigValidate(t *testing.T) {
	t.Setenv("TEST_OAUTH_SECRET", "s3cret")
	good := mcp.OAuthConfig{ClientID: "node", ClientSecretEnv: "TEST_OAUTH_SECRET", RedirectURL: "http://localhost:3000/callback",
		ClientMetadataURL: "https://node.example/client.json", Scopes: []string{"tools", "read:all"}}
	if err := (mcp.ServerConfig{URL: "https://mcp.example/mcp", OAuth: &good, Elicitation: mcp.ElicitDefaults}).Validate("r"); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*mcp.ServerConfig)
		field string
	}{
		{"no redirect", func(s *mcp.ServerConfig) { s.OAuth.RedirectURL = "" }, "mcp_servers.r.oauth.redirect_url"},
		{"relative redirect", func(s *mcp.ServerConfig) { s.OAuth.RedirectURL = "/callback" }, "mcp_servers.r.oauth.redirect_url"},
		{"http metadata", func(s *mcp.ServerConfig) { s.OAuth.ClientMetadataURL = "http://node.example/client.json" }, "mcp_servers.r.oauth.client_metadata_url"},
		{"root metadata", func(s *mcp.ServerConfig) { s.OAuth.ClientMetadataURL = "https://node.example/" }, "mcp_servers.r.oauth.client_metadata_url"},
		{"secret unset", func(s *mcp.ServerConfig) { s.OAuth.ClientSecretEnv = "TEST_OAUTH_UNSET_VARIABLE" }, "mcp_servers.r.oauth.client_secret_env"},
		{"secret bad name", func(s *mcp.ServerConfig) { s.OAuth.ClientSecretEnv = "A=B" }, "mcp_servers.r.oauth.client_secret_env"},
		{"secret no id", func(s *mcp.ServerConfig) { s.OAuth.ClientID = "" }, "mcp_servers.r.oauth.client_secret_env"},
		{"scope with space", func(s *mcp.ServerConfig) { s.OAuth.Scopes = []string{"a b"} }, "mcp_servers.r.oauth.scopes[0]"},
		{"stdio", func(s *mcp.ServerConfig) { s.URL, s.Command = "", "srv" }, "mcp_servers.r.oauth"},
		{"authorization header", func(s *mcp.ServerConfig) { s.Headers = map[string]string{"authorization": "Bearer x"} }, "mcp_servers.r.headers"},
		{"elicitation", func(s *mcp.ServerConfig) { s.Elicitation = "ask" }, "mcp_servers.r.elicitation"},
	} {
		o := good
		s := mcp.ServerConfig{URL: "https://mcp.example/mcp", OAuth: &o}
		tc.edit(&s)
		err := s.Validate("r")
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.field)
		}
	}
}

// The tokens an OAuth server issues at run time are secrets the client's Redactor
// learns as it obtains them: the first access and refresh tokens, the refreshed
// ones, and a dynamically registered client's secret. A server that echoes the
// token it was called with, in a result, in a tool's error or in the error that
// fails a connection (logged by the client), leaks it to no log line and, through
// the Redactor the session's events use, to no event.
func TestOAuthTokensAreRedacted(t *testing.T) {
	for _, dynamic := range []bool{false, true} {
		t.Run(map[bool]string{false: "preregistered", true: "dynamic"}[dynamic], func(t *testing.T) {
			srv := mcptest.EchoingOAuthServer(t)
			oauth := &mcp.OAuthConfig{RedirectURL: mcptest.RedirectURL}
			if !dynamic {
				t.Setenv("TEST_OAUTH_SECRET", "s3cret-preregistered")
				oauth.ClientID, oauth.ClientSecretEnv = "node", "TEST_OAUTH_SECRET"
			}
			red := redact.New()
			var logs syncBuffer
			c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"echoing": {URL: srv.URL + "/mcp", OAuth: oauth}},
				ConnectTimeout: 10 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Redactor: red,
				Logger: slog.New(redact.NewHandler(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}), red))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { c.Close(); <-done }()
			var whoami tools.Tool
			for whoami == nil {
				changed := c.Changed()
				if tl, ok := c.Tool("echoing__whoami"); ok {
					whoami = tl
					break
				}
				select {
				case <-changed:
				case <-ctx.Done():
					t.Fatalf("the server never connected: %+v\n%s", c.Status(), logs.String())
				}
			}
			admin, _ := c.Tool("echoing__admin")
			out, err := whoami.Call(ctx, tools.Call{Key: "s/1", Arguments: `{}`})
			if err != nil || out != "you are "+mcptest.AccessToken {
				t.Fatalf("whoami = %q, %v: the server should echo the refreshed token", out, err)
			}
			_, adminErr := admin.Call(ctx, tools.Call{Key: "s/2", Arguments: `{}`})
			if adminErr == nil || !strings.Contains(adminErr.Error(), mcptest.AccessToken) {
				t.Fatalf("admin: %v, want the server's error echoing the token", adminErr)
			}
			if !strings.Contains(logs.String(), "mcp server is down") || !strings.Contains(logs.String(), "no session yet for") {
				t.Fatalf("the refused connection should be logged:\n%s", logs.String())
			}
			secrets := []string{mcptest.FirstAccessToken, mcptest.FirstRefreshToken, mcptest.AccessToken, mcptest.RefreshToken}
			if dynamic {
				secrets = append(secrets, mcptest.DynamicClientSecret)
			}
			// What the session's events record (the output, the error), the log, and
			// any other text the Redactor sees: the first tokens and the registered
			// client's secret, which this server echoes nowhere, are known too.
			for _, text := range []string{red.String(out), red.String(adminErr.Error()), logs.String(), red.String(strings.Join(secrets, " "))} {
				for _, s := range secrets {
					if strings.Contains(text, s) {
						t.Errorf("%s is not redacted in %q", s, text)
					}
				}
			}
			if got := red.String(out); got != "you are "+redact.Redacted {
				t.Errorf("the echoed token: %q", got)
			}
		})
	}
}

// syncBuffer is a log buffer safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
