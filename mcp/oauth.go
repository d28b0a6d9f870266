package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/troupe-run/troupe/redact"
)

// OAuthConfig authorizes the node with a remote MCP server by OAuth 2.1, as the MCP
// authorization specification has it, through the go-sdk's
// auth.AuthorizationCodeHandler: on a 401 (or a 403 asking for more scopes) the
// node discovers the server's protected resource metadata and its authorization
// server, registers (a client ID metadata document, a pre-registered client, or
// dynamic client registration, in that order, as the authorization server allows),
// runs the authorization code flow with PKCE, and sends the access token with
// every request. Tokens are kept in memory only, reused across reconnections and
// refreshed with their refresh token; a node that restarts authorizes again.
//
// A node runs unattended and opens no browser: it requests the authorization URL
// itself and follows the authorization server's redirects; it takes the code from
// the redirect to RedirectURL. An authorization server that wants a person (a
// login or consent page) fails the connection with ErrAuthorizationNeedsPerson,
// naming the server, and the node retries it with backoff like any server that is
// down.
type OAuthConfig struct {
	// ClientID and ClientSecretEnv are a client registered with the
	// authorization server ahead of time: its ID, and the name of the environment
	// variable holding its secret (none: a public client). The secret is never
	// written in the configuration, and is redacted from events.
	ClientID        string `json:"client_id,omitempty"`
	ClientSecretEnv string `json:"client_secret_env,omitempty"`
	// ClientMetadataURL is the https URL of a client ID metadata document
	// describing the node as a client, used as its client ID by an authorization
	// server that supports such documents.
	ClientMetadataURL string `json:"client_metadata_url,omitempty"`
	// RedirectURL is the redirect URI registered for the client (required). The
	// node listens on nothing there: it reads the code from the redirect.
	RedirectURL string `json:"redirect_url"`
	// Scopes are requested when the server names none (neither in its
	// WWW-Authenticate challenge nor in its metadata's scopes_supported); the
	// scopes a server names take precedence.
	Scopes []string `json:"scopes,omitempty"`
}

// ErrAuthorizationNeedsPerson answers a connection whose authorization server
// wants a person to log in or consent: the node cannot.
var ErrAuthorizationNeedsPerson = errors.New("the OAuth authorization needs a person")

// The values of ServerConfig.Elicitation.
const (
	ElicitDecline  = "decline"
	ElicitDefaults = "defaults"
)

var (
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	scopeToken = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`)
)

// validate reports every field of o that cannot work, named from field.
func (o *OAuthConfig) validate(field string) []error {
	var errs []error
	bad := func(f, format string, args ...any) {
		errs = append(errs, fmt.Errorf(field+f+": "+format, args...))
	}
	if o.RedirectURL == "" {
		bad(".redirect_url", "is required: the redirect URI registered for the client")
	} else if u, err := url.Parse(o.RedirectURL); err != nil || !u.IsAbs() || (u.Scheme == "http" || u.Scheme == "https") && u.Host == "" || u.Fragment != "" {
		bad(".redirect_url", "%q is not an absolute URL without a fragment", o.RedirectURL)
	}
	if o.ClientMetadataURL != "" {
		if u, err := url.Parse(o.ClientMetadataURL); err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			bad(".client_metadata_url", "%q: want an https URL with a path (a client ID metadata document)", o.ClientMetadataURL)
		}
	}
	if o.ClientID != "" && strings.TrimSpace(o.ClientID) != o.ClientID || strings.ContainsAny(o.ClientID, "\x00\r\n") {
		bad(".client_id", "%q has surrounding white space or a control character", o.ClientID)
	}
	if o.ClientSecretEnv != "" {
		switch {
		case o.ClientID == "":
			bad(".client_secret_env", "is given without a client_id")
		case !envName.MatchString(o.ClientSecretEnv):
			bad(".client_secret_env", "%q is not an environment variable name", o.ClientSecretEnv)
		case os.Getenv(o.ClientSecretEnv) == "":
			bad(".client_secret_env", "the environment variable %s is not set", o.ClientSecretEnv)
		}
	}
	for i, sc := range o.Scopes {
		if !scopeToken.MatchString(sc) {
			bad(fmt.Sprintf(".scopes[%d]", i), "%q is not an OAuth scope: want printable characters without spaces, '\"' or '\\\\'", sc)
		}
	}
	return errs
}

// Secret is the client secret, read from the environment variable ClientSecretEnv
// ("" for none).
func (o *OAuthConfig) Secret() string {
	if o == nil || o.ClientSecretEnv == "" {
		return ""
	}
	return os.Getenv(o.ClientSecretEnv)
}

// oauthHandler makes the OAuth handler of the server named name: one per server,
// kept across its connections so that its tokens are. red learns the tokens it
// obtains (learningTokens).
func (o *OAuthConfig) oauthHandler(name string, hc *http.Client, red *redact.Redactor) (auth.OAuthHandler, error) {
	cfg := &auth.AuthorizationCodeHandlerConfig{
		NewTokenSource: func(ctx context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
			red.Add(c.ClientSecret) // a dynamic registration's, issued now
			learnToken(red, t)
			return learningTokens{ts: c.TokenSource(ctx, t), red: red}, nil
		},
		RedirectURL:              o.RedirectURL,
		AuthorizationCodeFetcher: headlessAuthorization(name, o.RedirectURL, hc),
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{o.RedirectURL}, ClientName: "troupe",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		}},
		RequestRefreshToken: true,
		Client:              hc,
	}
	if o.ClientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: o.ClientMetadataURL}
	}
	if o.ClientID != "" {
		cfg.PreregisteredClient = &oauthex.ClientCredentials{ClientID: o.ClientID}
		if secret := o.Secret(); secret != "" {
			cfg.PreregisteredClient.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: secret}
		}
	}
	if len(o.Scopes) > 0 {
		scopes := slices.Clone(o.Scopes)
		cfg.ScopeFilter = func(discovered []string) []string {
			if len(discovered) > 0 {
				return discovered
			}
			return slices.Clone(scopes)
		}
	}
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("mcp_servers.%s.oauth: %w", name, err)
	}
	return h, nil
}

// learningTokens is the token source of an authorized server: it has red learn
// every token it gives before the token is sent, the refreshed ones too.
type learningTokens struct {
	ts  oauth2.TokenSource
	red *redact.Redactor
}

func (l learningTokens) Token() (*oauth2.Token, error) {
	t, err := l.ts.Token()
	learnToken(l.red, t)
	return t, err
}

// learnToken has red learn t's access, refresh and ID tokens.
func learnToken(red *redact.Redactor, t *oauth2.Token) {
	if t == nil {
		return
	}
	id, _ := t.Extra("id_token").(string)
	red.Add(t.AccessToken, t.RefreshToken, id)
}

// maxAuthorizationRedirects bounds the redirects followed from the authorization
// URL to the redirect URL.
const maxAuthorizationRedirects = 10

// headlessAuthorization is the auth.AuthorizationCodeFetcher of an unattended
// node: it requests the authorization URL, follows the authorization server's
// redirects until one leads to redirectURL, and takes the code, state and issuer
// from that one. Anything else (a page to show a person, an error) fails.
func headlessAuthorization(name, redirectURL string, hc *http.Client) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		client := *hc
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if client.Timeout == 0 {
			client.Timeout = 30 * time.Second
		}
		redirect, err := url.Parse(redirectURL)
		if err != nil {
			return nil, fmt.Errorf("mcp server %q: oauth redirect_url: %w", name, err)
		}
		next := args.URL
		for range maxAuthorizationRedirects {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
			if err != nil {
				return nil, fmt.Errorf("mcp server %q: authorization request: %w", name, err)
			}
			resp, err := client.Do(req)
			if err != nil {
				return nil, fmt.Errorf("mcp server %q: authorization request: %w", name, err)
			}
			_ = resp.Body.Close()
			loc := resp.Header.Get("Location")
			if resp.StatusCode < 300 || resp.StatusCode > 399 || loc == "" {
				return nil, fmt.Errorf("mcp server %q: %w: its authorization server answered %s to %s instead of redirecting to %s; authorize the client ahead of time (a pre-registered client the server approves without a person)",
					name, ErrAuthorizationNeedsPerson, resp.Status, stripQuery(next), redirectURL)
			}
			to, err := req.URL.Parse(loc)
			if err != nil {
				return nil, fmt.Errorf("mcp server %q: the authorization server redirected to %q: %w", name, loc, err)
			}
			if to.Scheme != redirect.Scheme || to.Host != redirect.Host || to.Path != redirect.Path {
				next = to.String()
				continue
			}
			q := to.Query()
			if e := q.Get("error"); e != "" {
				return nil, fmt.Errorf("mcp server %q: the authorization server refused: %s %s", name, e, q.Get("error_description"))
			}
			if q.Get("code") == "" {
				return nil, fmt.Errorf("mcp server %q: the authorization server redirected to %s without a code", name, redirectURL)
			}
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		}
		return nil, fmt.Errorf("mcp server %q: %w: more than %d redirects from the authorization URL without reaching %s", name, ErrAuthorizationNeedsPerson, maxAuthorizationRedirects, redirectURL)
	}
}

// stripQuery is u without its query (which holds the state and PKCE challenge),
// for error messages.
func stripQuery(u string) string {
	before, _, _ := strings.Cut(u, "?")
	return before
}
