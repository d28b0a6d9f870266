// Package mcptest holds fake MCP servers that tests of the MCP client, and of a node
// that uses it, run against.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// The tokens EchoingOAuthServer issues, and the client secret of its dynamic
// registration.
const (
	// FirstAccessToken and FirstRefreshToken answer the authorization code,
	// FirstAccessToken already expired: a client refreshes it before its first use.
	FirstAccessToken, FirstRefreshToken = "at-first-Q1W2E3R4", "rt-first-T5Y6U7I8"
	// AccessToken and RefreshToken answer the refresh; AccessToken is the one the
	// MCP server takes.
	AccessToken, RefreshToken = "at-refreshed-A9S8D7F6", "rt-refreshed-G5H4J3K2"
	// DynamicClientSecret is the secret of a client registered dynamically.
	DynamicClientSecret = "dyn-secret-Z1X2C3V4"
)

// EchoingOAuthServer is an MCP server behind OAuth 2.1 and the authorization server
// that gives its tokens (one httptest server for both, its MCP endpoint at /mcp),
// which echoes the token it is called with, as a careless server does: its tool
// "whoami" answers "you are <token>", its tool "admin" fails with an error naming
// the token, and it refuses the first initialize it is sent with a JSON-RPC error
// naming the token (so that the client's first connection fails with it). The
// authorization server approves any client without a person, pre-registered
// (RedirectURL as the redirect URL) or registered dynamically; its tokens are the
// constants above.
func EchoingOAuthServer(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mcpSrv := sdk.NewServer(&sdk.Implementation{Name: "echoing", Version: "1"}, nil)
	seen := func(req *sdk.CallToolRequest) string {
		return strings.TrimPrefix(req.Extra.Header.Get("Authorization"), "Bearer ")
	}
	sdk.AddTool(mcpSrv, &sdk.Tool{Name: "whoami"}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are " + seen(req)}}}, nil, nil
	})
	sdk.AddTool(mcpSrv, &sdk.Tool{Name: "admin"}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the token " + seen(req) + " lacks the scope admin"}}}, nil, nil
	})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token != AccessToken {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Scopes: []string{"tools"}, Expiration: time.Now().Add(time.Hour)}, nil
	}
	var refused atomic.Bool
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpSrv }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: srv.URL + "/.well-known/oauth-protected-resource/mcp"})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(body, &msg)
			if msg.Method == "initialize" && refused.CompareAndSwap(false, true) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
					"error": map[string]any{"code": -32603, "message": "no session yet for " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")}})
				return
			}
			handler.ServeHTTP(w, r)
		})))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: srv.URL + "/mcp", AuthorizationServers: []string{srv.URL}, ScopesSupported: []string{"tools"}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/authorize",
			"token_endpoint": srv.URL + "/token", "registration_endpoint": srv.URL + "/register", "response_types_supported": []string{"code"},
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"client_secret_post"}})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var meta map[string]any
		_ = json.NewDecoder(r.Body).Decode(&meta)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["client_id"], meta["client_secret"] = "dynamic-client", DynamicClientSecret
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(meta)
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		to, err := url.Parse(r.URL.Query().Get("redirect_uri"))
		if err != nil {
			http.Error(w, "bad redirect_uri", http.StatusBadRequest)
			return
		}
		to.RawQuery = url.Values{"code": {"the-code"}, "state": {r.URL.Query().Get("state")}}.Encode()
		http.Redirect(w, r, to.String(), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.PostFormValue("grant_type") == "authorization_code" && r.PostFormValue("code") == "the-code":
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": FirstAccessToken, "refresh_token": FirstRefreshToken, "token_type": "Bearer", "expires_in": 1})
		case r.PostFormValue("grant_type") == "refresh_token" && r.PostFormValue("refresh_token") == FirstRefreshToken:
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": AccessToken, "refresh_token": RefreshToken, "token_type": "Bearer", "expires_in": 3600})
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
		}
	})
	return srv
}

// RedirectURL is a redirect URL for EchoingOAuthServer's pre-registered clients:
// the client reads the code from the redirect, and nothing listens there.
const RedirectURL = "http://127.0.0.1:9/callback"
