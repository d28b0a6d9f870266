package node

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/redact"
)

// AuthConfig is who may call the node's HTTP API and how often (HTTPConfig.Auth).
//
// With no token (neither Tokens nor TokensFile), the API is open, as it always was;
// with any, every request but those to the public paths (PublicPaths) must carry
// "Authorization: Bearer TOKEN" with one of them, or the session cookie of a
// dashboard login made with one (uisession.go), or is answered 401. Rate limits
// apply per token, or per client IP address when the API is open.
type AuthConfig struct {
	// Tokens are bearer tokens that may call the API.
	Tokens []string
	// TokensFile is a file of more tokens, one a line; blank lines and lines
	// starting with # are skipped. Node.ReloadTokens reads it again.
	TokensFile string
	// Rate is the requests a second each token (or each client IP, without tokens)
	// may make on average; 0 means no limit.
	Rate float64
	// Burst is how many requests a token may make at once above Rate (default
	// twice Rate, at least 1).
	Burst int
	// SessionTTL is how long a dashboard login (POST /v1/auth/login) lasts before
	// the browser must log in again; 0 is DefaultSessionTTL.
	SessionTTL time.Duration
}

// CORSConfig lets web pages of other origins call the API (HTTPConfig.CORS).
type CORSConfig struct {
	// Origins are the origins (scheme://host[:port]) whose pages may call the API;
	// none turns CORS off: browsers then refuse cross-origin calls.
	Origins []string
}

// PublicPaths are the paths every client may call without a token and without the
// API's rate limit: the health and liveness checks (for load balancers and probes), the A2A agent
// card (which tells other agents how to authenticate; the named agents' cards are
// open too: isPublic), the dashboard's files (no
// data: the page's API calls are signed in) and the dashboard's login (which has a
// rate limit of its own, per client IP). A path ending in "/" covers every path
// under it.
var PublicPaths = []string{"/healthz", "/livez", "/.well-known/agent-card.json", "/.well-known/agent.json", "/ui/", "/ui", "/v1/auth/login"}

// isPublic reports whether path is one of PublicPaths, under one ending in "/", or
// the A2A card of a named agent (/a2a/NAME/.well-known/agent-card.json, or A2A
// 0.2's /a2a/NAME/.well-known/agent.json): each card
// tells a client how to authenticate, and the node's card lists the named agents
// already.
func isPublic(path string) bool {
	for _, p := range PublicPaths {
		if path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(path, "/a2a/"); ok {
		for _, card := range []string{a2a.CardPath, a2a.LegacyCardPath} {
			if name, ok := strings.CutSuffix(rest, card); ok {
				return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
			}
		}
	}
	return false
}

// DefaultMaxBody is the default of HTTPConfig.MaxBody: the request body a route
// takes when it sets no bound of its own.
const DefaultMaxBody = 1 << 20

// Validate reports settings that cannot work.
func (c AuthConfig) Validate() error {
	var errs []error
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("auth rate %v: want requests a second, 0 or more (0: no limit)", c.Rate))
	}
	if c.Burst < 0 {
		errs = append(errs, fmt.Errorf("auth burst %d: want 0 or more (0: twice the rate)", c.Burst))
	}
	if c.SessionTTL < 0 {
		errs = append(errs, fmt.Errorf("auth session ttl %v: want a duration, 0 or more (0: %v)", c.SessionTTL, DefaultSessionTTL))
	}
	for i, t := range c.Tokens {
		if err := checkToken(t); err != nil {
			errs = append(errs, fmt.Errorf("auth token %d: %w", i+1, err))
		}
	}
	return errors.Join(errs...)
}

// Validate reports origins that are not scheme://host[:port].
func (c CORSConfig) Validate() error {
	var errs []error
	for _, o := range c.Origins {
		if err := checkOrigin(o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkOrigin(o string) error {
	if o == "*" || o == "null" {
		return fmt.Errorf("cors origin %q: name each origin, as https://app.example", o)
	}
	scheme, host, ok := strings.Cut(o, "://")
	if !ok || (scheme != "http" && scheme != "https") || host == "" || strings.ContainsAny(host, "/?#*@ ") {
		return fmt.Errorf("cors origin %q: want scheme://host[:port], as https://app.example, without a path", o)
	}
	return nil
}

// minTokenLen is the shortest token accepted: a guessable token is no protection.
const minTokenLen = 16

// maxTokenLen is the longest: a token travels in a request's header.
const maxTokenLen = 4096

// checkToken refuses tokens too short to be secret or that cannot travel in a header.
// The error never contains the token.
func checkToken(t string) error {
	if len(t) < minTokenLen {
		return fmt.Errorf("is %d characters; want at least %d (e.g. openssl rand -hex 32)", len(t), minTokenLen)
	}
	if len(t) > maxTokenLen {
		return fmt.Errorf("is %d characters; want at most %d (e.g. openssl rand -hex 32)", len(t), maxTokenLen)
	}
	for _, c := range []byte(t) {
		if c <= ' ' || c >= 0x7f {
			return errors.New("has a space, a control character or a non-ASCII byte; want printable ASCII")
		}
	}
	return nil
}

// MaxTokensFileSize bounds a tokens file: some 15,000 tokens of 64 characters.
// A larger file is the wrong one (a log, a device), not read whole into memory.
const MaxTokensFileSize = 1 << 20

// ReadTokensFile reads a tokens file: one token a line, blank lines and lines
// starting with # skipped. Its errors name the file and line, never a token.
func ReadTokensFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth tokens file: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxTokensFileSize+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("auth tokens file: %w", err)
	}
	if len(b) > MaxTokensFileSize {
		return nil, fmt.Errorf("auth tokens file %s is larger than %d bytes, the most a tokens file may hold", path, MaxTokensFileSize)
	}
	var tokens []string
	for i, text := range strings.Split(string(b), "\n") {
		line := i + 1
		if line == 1 && strings.HasPrefix(text, "\uFEFF") {
			return nil, fmt.Errorf("auth tokens file %s, line 1: the file begins with a byte order mark (U+FEFF): save it as UTF-8 without one, or as ASCII", path)
		}
		t := strings.TrimSpace(text)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("auth tokens file %s, line %d: the token %w", path, line, err)
		}
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// gate checks every request of the HTTP API before its route: CORS, the bearer
// token, the rate limit. It keeps the tokens as SHA-256 hashes only.
type gate struct {
	cfg     AuthConfig
	origins map[string]bool
	// cop refuses state-changing requests that a page of another site sends (a form
	// posted to a node on localhost, a fetch with a text/plain body): browsers send
	// them with the user's cookies and without a preflight, on an open node too.
	// The CORS origins are trusted.
	cop *http.CrossOriginProtection

	mu     sync.RWMutex
	hashes [][sha256.Size]byte

	// serving are the requests signed in with a token that are being served, each
	// with the cancel of its context: a reload that drops their token cancels
	// them, so that a stream opened with a revoked token ends (cut).
	servingMu sync.Mutex
	serving   map[*servedRequest]struct{}

	limits *limiters

	// own are this host's names (hostNames), looked up once.
	ownOnce sync.Once
	own     map[string]bool

	// sessions are the dashboard's logins; logins limits the login attempts per
	// client IP, lookups the look-ups of cookies this node does not hold.
	sessions *uiSessions
	logins   *limiters
	lookups  *limiters

	// proxies are the trusted proxies (HTTPConfig.TrustedProxies): clientIP.
	proxies []netip.Prefix

	logger *slog.Logger
	// red learns every token the gate reads, at start and at each reload: a token
	// is a secret from the moment it opens the API, and stays one after a reload
	// drops it.
	red *redact.Redactor
	// refused counts the requests the gate answered itself, by status.
	refused *prometheus.CounterVec
}

func newGate(h HTTPConfig, logger *slog.Logger, red *redact.Redactor) (*gate, error) {
	auth, cors := h.Auth, h.CORS
	ttl := auth.SessionTTL
	if ttl == 0 {
		ttl = DefaultSessionTTL
	}
	proxies, err := parseProxies(h.TrustedProxies)
	if err != nil {
		return nil, err
	}
	g := &gate{cfg: auth, origins: map[string]bool{}, logger: logger, proxies: proxies, red: red,
		logins: newLoginLimiters(), lookups: newLookupLimiters(),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "http",
			Name: "refused_total", Help: "HTTP requests refused before their route, and dashboard logins refused: 401 (no or a wrong token), 429 (past the rate limit, the login limit or the look-ups of unknown session cookies of a client address), 403 (a CORS preflight from another origin, a state-changing request from another site's page, or a cookie-signed request without its CSRF value)."},
			[]string{"code"})}
	g.sessions = newUISessions(ttl, maxUISessions, g.tokenHashes, logger)
	g.cop = http.NewCrossOriginProtection()
	for _, o := range cors.Origins {
		g.origins[o] = true
		if err := g.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("cors origin %q: %w", o, err)
		}
	}
	if err := g.reload(); err != nil {
		return nil, err
	}
	if auth.Rate > 0 {
		burst := auth.Burst
		if burst == 0 {
			burst = max(1, int(math.Ceil(2*auth.Rate)))
		}
		g.limits = newLimiters(rate.Limit(auth.Rate), burst)
	}
	return g, nil
}

// reload hashes the configured tokens and those of the tokens file, read again, and
// registers them with the node's redactor.
func (g *gate) reload() error {
	tokens := slices.Clone(g.cfg.Tokens)
	if g.cfg.TokensFile != "" {
		more, err := ReadTokensFile(g.cfg.TokensFile)
		if err != nil {
			return err
		}
		if len(more) == 0 && len(tokens) == 0 {
			// An emptied file must not open the API.
			return fmt.Errorf("auth tokens file %s has no token: an API that had tokens stays closed", g.cfg.TokensFile)
		}
		tokens = append(tokens, more...)
	}
	g.red.Add(tokens...) // before they are accepted
	hashes := make([][sha256.Size]byte, len(tokens))
	for i, t := range tokens {
		hashes[i] = sha256.Sum256([]byte(t))
	}
	g.mu.Lock()
	g.hashes = hashes
	g.mu.Unlock()
	g.cut()
	return nil
}

// servedRequest is a request signed in with a token, being served: by the
// dashboard's cookie when session is set (the SHA-256 of its ID).
type servedRequest struct {
	token   [sha256.Size]byte
	session *[sha256.Size]byte
	cancel  context.CancelFunc
}

// serve serves r, signed in with the token of hash sum (by the cookie of the
// session whose ID has hash session, when not nil), with a context that cut
// cancels when a reload drops the token, and cutSession when the session ends;
// a request signed in by a session also ends when the session expires, at
// expires, as a stream it opened would otherwise go on past the sign-in.
func (g *gate) serve(h http.Handler, w http.ResponseWriter, r *http.Request, sum [sha256.Size]byte, session *[sha256.Size]byte, expires time.Time) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if session != nil && !expires.IsZero() {
		expiry := time.AfterFunc(time.Until(expires), cancel)
		defer expiry.Stop()
	}
	ctx = context.WithValue(ctx, principalKey{}, "token:"+hex.EncodeToString(sum[:16]))
	s := &servedRequest{token: sum, session: session, cancel: cancel}
	g.servingMu.Lock()
	if g.serving == nil {
		g.serving = map[*servedRequest]struct{}{}
	}
	g.serving[s] = struct{}{}
	g.servingMu.Unlock()
	defer func() {
		g.servingMu.Lock()
		delete(g.serving, s)
		g.servingMu.Unlock()
	}()
	h.ServeHTTP(w, r.WithContext(ctx))
}

// principalKey is the key of a request's principal in its context (RequestPrincipal).
type principalKey struct{}

// RequestPrincipal returns who the request of ctx is signed in as: on a node
// with API tokens, "token:" and the head of a digest of the token it carries,
// or that the dashboard's cookie it carries was made with, the same for every
// request with that token and another for each token; "" on a node without
// tokens, and on a public route. It names the caller of a call without telling
// the token (MCP's direct calls keyed per caller: mcp.PrincipalHeader).
func RequestPrincipal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// cutSession cancels the requests being served that the cookie of the session
// whose ID is id signed in: the session ended (logout).
func (g *gate) cutSession(id string) {
	k := sha256.Sum256([]byte(id))
	g.servingMu.Lock()
	defer g.servingMu.Unlock()
	for s := range g.serving {
		if s.session != nil && *s.session == k {
			s.cancel()
		}
	}
}

// cut cancels the requests being served whose token is no longer one of the
// node's: their streams end.
func (g *gate) cut() {
	g.servingMu.Lock()
	defer g.servingMu.Unlock()
	for s := range g.serving {
		if !g.known(s.token) {
			s.cancel()
		}
	}
}

// tokenHashes are the SHA-256 of the tokens.
func (g *gate) tokenHashes() [][sha256.Size]byte {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.hashes
}

// keepSignIns keeps the dashboard's sign-ins in log (uisession.go), where every
// node over the same log finds them; it is called before the gate serves.
func (g *gate) keepSignIns(log eventlog.Log) { g.sessions.log = log }

// closed reports whether requests need a token.
func (g *gate) closed() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.hashes) > 0 || g.cfg.TokensFile != ""
}

// match returns the hash of the request's bearer token when it is one of the
// tokens. Every token is compared, in constant time, against the hash of the one
// given: neither its length nor which token it is leaks through the time taken.
func (g *gate) match(r *http.Request) ([sha256.Size]byte, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return [sha256.Size]byte{}, false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return h, g.known(h)
}

// known reports whether h is the hash of one of the tokens, comparing it with
// every one in constant time.
func (g *gate) known(h [sha256.Size]byte) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	found := 0
	for _, k := range g.hashes {
		found |= subtle.ConstantTimeCompare(h[:], k[:])
	}
	return found == 1
}

// wrap puts the gate in front of h. Its refusals of a request to one of the paths
// rpc holds (the routes that speak JSON-RPC) are JSON-RPC errors.
func (g *gate) wrap(h http.Handler, rpc map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.cors(w, r) {
			return
		}
		deny := writeError
		if rpc[r.URL.Path] {
			deny = writeRPCRefusal
		}
		if !g.closed() && rebound(r, g.hostNames) {
			g.refuse(r, http.StatusForbidden)
			deny(w, http.StatusForbidden, "Host %s is not a name of this host: a node without tokens, for a request to a loopback address, answers only to localhost, a name under .localhost, "+
				"localhost.localdomain, this host's name, a name without a dot or an IP address, as a page of another site may point a name of its own at 127.0.0.1 (DNS rebinding); call it so, or give the node tokens", QuoteHead(r.Host))
			return
		}
		if err := g.cop.Check(r); err != nil {
			g.refuse(r, http.StatusForbidden)
			deny(w, http.StatusForbidden, "a %s from a page of another site is refused (Sec-Fetch-Site %q, Origin %q): only the node's own pages and the configured cors origins may change things",
				r.Method, r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin"))
			return
		}
		if isPublic(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		key := "ip:" + g.clientIP(r)
		var token, session *[sha256.Size]byte // the hashes of the token the request is signed in with, and of its cookie's session ID
		var expires time.Time                 // when the cookie's session ends
		if g.closed() {
			sum, ok := g.match(r)
			if !ok && r.Header.Get("Authorization") == "" {
				// The dashboard's session cookie stands for the token it was made with.
				sess, found, err := g.cookieSession(r)
				var limited *lookupLimited
				switch {
				case errors.As(err, &limited):
					secs := max(1, int(math.Ceil(limited.wait.Seconds())))
					g.refuse(r, http.StatusTooManyRequests)
					w.Header().Set("Retry-After", strconv.Itoa(secs))
					deny(w, http.StatusTooManyRequests, "too many unknown session cookies from this address; retry after %d s", secs)
					return
				case err != nil:
					g.logger.Warn("the dashboard's sign-in could not be read from the event log", "err", err)
					deny(w, http.StatusServiceUnavailable, "the dashboard's sign-in could not be read from the event log: %v", err)
					return
				}
				if found {
					if !safeMethod(r.Method) && !csrfOK(r, sess) {
						g.refuse(r, http.StatusForbidden)
						deny(w, http.StatusForbidden, "a %s signed in by the dashboard's cookie must come from the dashboard's own pages, with the login's csrf value in %s", r.Method, CSRFHeader)
						return
					}
					sum, ok = sess.token, true
					if c, err := r.Cookie(SessionCookie); err == nil {
						k := sha256.Sum256([]byte(c.Value))
						session, expires = &k, sess.expires
					}
				}
			}
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="troupe"`)
				msg := "this node needs a bearer token: send Authorization: Bearer TOKEN (the dashboard at /ui/ logs in with one)"
				if r.Header.Get("Authorization") != "" {
					w.Header().Set("WWW-Authenticate", `Bearer realm="troupe", error="invalid_token"`)
					msg = "the bearer token is not one of this node's"
				}
				g.refuse(r, http.StatusUnauthorized)
				deny(w, http.StatusUnauthorized, "%s", msg)
				return
			}
			key = "token:" + string(sum[:])
			token = &sum
		}
		if g.limits != nil {
			if wait, ok := g.limits.allow(key, time.Now()); !ok {
				secs := int(math.Ceil(wait.Seconds()))
				g.refuse(r, http.StatusTooManyRequests)
				w.Header().Set("Retry-After", strconv.Itoa(max(1, secs)))
				deny(w, http.StatusTooManyRequests, "too many requests: at most %v a second (burst %d); retry after %d s",
					g.limits.rate, g.limits.burst, max(1, secs))
				return
			}
		}
		if token != nil {
			g.serve(h, w, r, *token, session, expires)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// rebound reports whether r came to a loopback address of the node (the address
// the request arrived on: a node on 0.0.0.0 takes requests over 127.0.0.1 too)
// under a name that may not be this host's: a DNS name with a dot other than
// localhost and the names under .localhost (which browsers resolve to loopback
// themselves), the loopback names of /etc/hosts (localhost.localdomain,
// localhost4.localdomain4, localhost6.localdomain6: RHEL's and Fedora's) and
// this host's own names (own). A page of another site whose own name its DNS
// then points at 127.0.0.1 (DNS rebinding) is of the same origin as the node to
// the browser, which sends its requests, and lets the page read their answers:
// on a node without tokens, all its sessions, and tasks run. An IP address is no
// DNS name to rebind, in any form (127.1, as curl sends it as typed), nor is a
// name without a dot in any public zone (a container's, a test's "node"), nor
// this host's name, unless its DNS is the attacker's. /mcp had a check of its
// own (the MCP SDK's) where the rest of the API did not.
func rebound(r *http.Request, own func() map[string]bool) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(local.String())
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return false
	}
	return reboundHost(r.Host, own)
}

// reboundHost is rebound's rule for a request's Host.
func reboundHost(host string, own func() map[string]bool) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case !strings.Contains(host, "."), host == "localhost", strings.HasSuffix(host, ".localhost"),
		host == "localhost.localdomain", host == "localhost4.localdomain4", host == "localhost6.localdomain6",
		net.ParseIP(host) != nil, ipv4Form(host):
		return false
	}
	return !own()[host]
}

// ipv4Form reports whether host is an IPv4 address in a form that clients read
// as one, and DNS cannot hold: 1 to 4 parts of decimal digits or 0x and hex
// digits (127.1, 0x7f.0.0.1), as the URL standard reads a host whose last part
// is a number. No top-level domain is a number.
func ipv4Form(host string) bool {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return false
	}
	for _, p := range parts {
		digits, base := p, "0123456789"
		if h, ok := strings.CutPrefix(p, "0x"); ok {
			digits, base = h, "0123456789abcdef"
		}
		if digits == "" && p != "0x" || strings.Trim(digits, base) != "" {
			return false
		}
	}
	return true
}

// hostNames returns the names of this host (lower case, without a trailing
// dot): its host name and the canonical name it resolves to (/etc/hosts first:
// on Debian, the FQDN that `hostname -f` prints, on 127.0.1.1). They are looked
// up once, when a request first needs them, for at most hostNamesLookup.
func (g *gate) hostNames() map[string]bool {
	g.ownOnce.Do(func() {
		g.own = map[string]bool{}
		name, err := os.Hostname()
		if err != nil || name == "" {
			return
		}
		norm := func(n string) string { return strings.TrimSuffix(strings.ToLower(n), ".") }
		g.own[norm(name)] = true
		ctx, cancel := context.WithTimeout(context.Background(), hostNamesLookup)
		defer cancel()
		if cname, err := net.DefaultResolver.LookupCNAME(ctx, name); err == nil && cname != "" {
			g.own[norm(cname)] = true
		}
	})
	return g.own
}

// hostNamesLookup bounds the look-up of this host's canonical name.
const hostNamesLookup = 2 * time.Second

// refuse counts and logs (at debug level: a flood must not flood the log) a
// request the gate refused: its method, path and client IP, never its headers.
func (g *gate) refuse(r *http.Request, code int) {
	g.refused.WithLabelValues(strconv.Itoa(code)).Inc()
	g.logger.Debug("http request refused", "code", code, "method", r.Method, "path", r.URL.Path, "client", g.clientIP(r))
}

// CORS answers: the methods and request headers the API uses, and the response
// headers a page may read.
const (
	corsMethods       = "GET, POST, DELETE"
	corsHeaders       = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version"
	corsExposeHeaders = "Retry-After, WWW-Authenticate, Mcp-Session-Id"
)

// cors adds the CORS headers for an allowed origin and answers preflight requests;
// it returns false when it answered. Without configured origins it does nothing:
// browsers keep other origins' pages out. It never allows every origin ("*").
func (g *gate) cors(w http.ResponseWriter, r *http.Request) bool {
	if len(g.origins) == 0 {
		return true
	}
	origin := r.Header.Get("Origin")
	w.Header().Add("Vary", "Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	if origin == "" || !g.origins[origin] {
		if preflight {
			g.refuse(r, http.StatusForbidden)
			writeError(w, http.StatusForbidden, "origin %q may not call this API (cors origins)", origin)
			return false
		}
		return true
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	if !preflight {
		w.Header().Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return true
	}
	w.Header().Set("Access-Control-Allow-Methods", corsMethods)
	w.Header().Set("Access-Control-Allow-Headers", corsHeaders)
	w.Header().Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return false
}

// clientIP is the address of the client the request comes from, for what is
// counted per client (the login limit, the rate limit of an open API) and logged:
// the connection's peer, or, when the peer is one of the trusted proxies, the
// rightmost address of X-Forwarded-For that is not one of them (each proxy
// appends the address it was reached from, so only the part the trusted ones
// wrote can be believed; the left of it is the client's to make up). When every
// hop is trusted it is the leftmost; an entry that is no address ends the walk at
// the last address found. Without trusted proxies X-Forwarded-For is ignored.
func (g *gate) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if len(g.proxies) == 0 {
		return host
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !g.trusted(peer.Unmap()) {
		return host
	}
	client := peer.Unmap()
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, ok := parseHop(parts[j])
			if !ok {
				return client.String()
			}
			client = a
			if !g.trusted(a) {
				return a.String()
			}
		}
	}
	return client.String()
}

// trusted reports whether a is one of the trusted proxies.
func (g *gate) trusted(a netip.Addr) bool {
	for _, p := range g.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads an address of X-Forwarded-For: an IP, with or without a port
// (1.2.3.4:80, [2001:db8::1]:80) or brackets.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// parseProxies reads HTTPConfig.TrustedProxies: CIDR prefixes (10.0.0.0/8,
// fd00::/8) or single addresses.
func parseProxies(list []string) ([]netip.Prefix, error) {
	var (
		out  []netip.Prefix
		errs []error
	)
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else {
			errs = append(errs, fmt.Errorf("trusted proxy %q: want an address or a CIDR prefix, as 10.0.0.0/8 or 192.0.2.7", s))
		}
	}
	return out, errors.Join(errs...)
}

// limiters holds a token bucket per client. A bucket left alone for burst/rate is
// full again, the same as a new one: such buckets are dropped, so the memory
// follows the clients seen in the last burst/rate seconds, not every client ever.
type limiters struct {
	rate  rate.Limit
	burst int
	idle  time.Duration

	mu        sync.Mutex
	m         map[string]*clientLimit
	nextSweep int
}

type clientLimit struct {
	lim  *rate.Limiter
	last time.Time
}

// minSweep is the number of buckets below which none are dropped.
const minSweep = 1024

func newLimiters(r rate.Limit, burst int) *limiters {
	idle := time.Duration(float64(burst) / float64(r) * float64(time.Second))
	return &limiters{rate: r, burst: burst, idle: idle, m: map[string]*clientLimit{}, nextSweep: minSweep}
}

// allow takes a request from key's bucket; when it is empty it says how long until
// a request would be allowed.
func (l *limiters) allow(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.m[key]
	if !ok {
		if len(l.m) >= l.nextSweep {
			l.sweep(now)
		}
		c = &clientLimit{lim: rate.NewLimiter(l.rate, l.burst)}
		l.m[key] = c
	}
	c.last = now
	if c.lim.AllowN(now, 1) {
		return 0, true
	}
	res := c.lim.ReserveN(now, 1)
	wait := res.DelayFrom(now)
	res.CancelAt(now)
	return wait, false
}

// sweep drops the buckets that are full again; the next sweep comes when the
// buckets have doubled, so sweeping costs O(1) a request.
func (l *limiters) sweep(now time.Time) {
	for k, c := range l.m {
		if now.Sub(c.last) >= l.idle {
			delete(l.m, k)
		}
	}
	l.nextSweep = max(minSweep, 2*len(l.m))
}

// size is the number of buckets held.
func (l *limiters) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// Enabled reports whether requests need a token.
func (c AuthConfig) Enabled() bool { return len(c.Tokens) > 0 || c.TokensFile != "" }
