package node

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The dashboard's login. A browser cannot put a bearer token on a page load or an
// EventSource, so with tokens on, the dashboard trades one for a session cookie:
// POST /v1/auth/login {"token"} checks the token as the gate does and answers with
// two cookies, troupe_session (HttpOnly: a random session ID, never the token) and
// troupe_csrf (readable by the page), and the CSRF value in its body. The gate
// then takes a valid troupe_session in place of the bearer header, as the token it
// was made with: that token's rate limit applies, and a token dropped by
// ReloadTokens ends its sessions. A state-changing request (any method but GET,
// HEAD and OPTIONS) signed in by the cookie alone must also carry the CSRF value
// in X-Troupe-CSRF and, when the browser says where it comes from
// (Sec-Fetch-Site), come from the node's own origin: a form another site posts
// with the cookie is refused. POST /v1/auth/logout ends the session.
//
// Sessions are held in the memory of the node that made them: a restart signs
// everybody out, and behind a load balancer the dashboard needs sticky sessions
// (bearer tokens work on every node).

// Cookie and header names of the dashboard's login.
const (
	// SessionCookie holds the session ID (HttpOnly).
	SessionCookie = "troupe_session"
	// CSRFCookie holds the session's CSRF value, for the page to copy into CSRFHeader.
	CSRFCookie = "troupe_csrf"
	// CSRFHeader carries the CSRF value on state-changing requests signed in by cookie.
	CSRFHeader = "X-Troupe-CSRF"
)

// DefaultSessionTTL is the default of AuthConfig.SessionTTL.
const DefaultSessionTTL = 12 * time.Hour

// Login attempts: each client IP may make loginBurst at once, then one every
// loginEvery; past that, login answers 429 without looking at the token.
const (
	loginBurst = 10
	loginEvery = 6 * time.Second
	// maxUISessions bounds the sessions a node holds; past it the one that
	// expires first is dropped.
	maxUISessions = 10000
	// loginMaxBody bounds POST /v1/auth/login's body.
	loginMaxBody = 4 << 10
)

// uiSession is one dashboard login: the token it was made with (its SHA-256), the
// CSRF value its state-changing requests carry, and when it ends.
type uiSession struct {
	token   [sha256.Size]byte
	csrf    string
	expires time.Time
}

// uiSessions are the logins of a node's dashboard, by the SHA-256 of their session
// ID (the ID itself is kept by the browser only).
type uiSessions struct {
	ttl time.Duration
	max int

	mu sync.Mutex
	m  map[[sha256.Size]byte]uiSession
}

func newUISessions(ttl time.Duration, max int) *uiSessions {
	return &uiSessions{ttl: ttl, max: max, m: map[[sha256.Size]byte]uiSession{}}
}

// randomID is 32 random bytes, base64url.
func randomID() (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// open starts a session for the token with SHA-256 token and returns its ID.
func (s *uiSessions) open(token [sha256.Size]byte, now time.Time) (string, uiSession, error) {
	id, err := randomID()
	if err != nil {
		return "", uiSession{}, err
	}
	csrf, err := randomID()
	if err != nil {
		return "", uiSession{}, err
	}
	sess := uiSession{token: token, csrf: csrf, expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max {
		s.sweep(now)
	}
	if len(s.m) >= s.max {
		var first [sha256.Size]byte
		var at time.Time
		for k, v := range s.m {
			if at.IsZero() || v.expires.Before(at) {
				first, at = k, v.expires
			}
		}
		delete(s.m, first)
	}
	s.m[sha256.Sum256([]byte(id))] = sess
	return id, sess, nil
}

// sweep drops the sessions that ended; s.mu is held.
func (s *uiSessions) sweep(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
}

// lookup returns the session with ID id when it has not ended.
func (s *uiSessions) lookup(id string, now time.Time) (uiSession, bool) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[k]
	if ok && !now.Before(sess.expires) {
		delete(s.m, k)
		return uiSession{}, false
	}
	return sess, ok
}

// end drops the session with ID id.
func (s *uiSessions) end(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// size is the number of sessions held.
func (s *uiSessions) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// cookieSession is the session of the request's troupe_session cookie, when it
// is one that has not ended and its token is still one of the node's.
func (g *gate) cookieSession(r *http.Request) (uiSession, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return uiSession{}, false
	}
	sess, ok := g.sessions.lookup(c.Value, time.Now())
	if !ok || !g.known(sess.token) {
		return uiSession{}, false
	}
	return sess, true
}

// safeMethod reports whether a request of method m changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin reports whether the browser says the request comes from the node's
// own pages (Sec-Fetch-Site same-origin, or none: typed by the user); a client
// that does not send the header (not a browser, or an old one) is not refused for
// it: the CSRF value is the check there.
func sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin" || site == "none"
}

// csrfOK reports whether a state-changing request signed in by sess's cookie
// carries the session's CSRF value and comes from the node's own origin.
func csrfOK(r *http.Request, sess uiSession) bool {
	got := r.Header.Get(CSRFHeader)
	return sameOrigin(r) && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// loginBody is the body of POST /v1/auth/login.
type loginBody struct {
	// Token is one of the node's bearer tokens.
	Token string `json:"token"`
}

// LoginAnswer is the answer of POST /v1/auth/login.
type LoginAnswer struct {
	// CSRF is the value state-changing requests signed in by the session cookie
	// carry in X-Troupe-CSRF (the troupe_csrf cookie holds it too).
	CSRF string `json:"csrf"`
	// ExpiresAt is when the session ends: log in again then.
	ExpiresAt time.Time `json:"expires_at"`
}

// secureRequest reports whether the browser reached the node over TLS, itself or
// through a proxy that says so (X-Forwarded-Proto: https): the cookies are then
// Secure. A false header can only keep a cookie off plain HTTP.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-Proto"), ",")[0]), "https")
}

// setSessionCookies sets (maxAge > 0) or clears (maxAge < 0) the login's cookies.
func setSessionCookies(w http.ResponseWriter, r *http.Request, id, csrf string, maxAge int) {
	secure := secureRequest(r)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: csrf, Path: "/", MaxAge: maxAge,
		Secure: secure, SameSite: http.SameSiteStrictMode})
}

// login serves POST /v1/auth/login: a token for a session cookie. Every attempt
// costs one from the client IP's login bucket; a wrong token is answered 401 after
// the same constant-time comparison as a right one.
func (g *gate) login(w http.ResponseWriter, r *http.Request) {
	if !g.closed() {
		writeError(w, http.StatusConflict, "this node has no tokens: its API is open and needs no login")
		return
	}
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	if !sameOrigin(r) {
		g.refuse(r, http.StatusForbidden)
		writeError(w, http.StatusForbidden, "a login must come from the dashboard's own origin (Sec-Fetch-Site %q)", r.Header.Get("Sec-Fetch-Site"))
		return
	}
	if wait, ok := g.logins.allow("ip:"+clientIP(r), time.Now()); !ok {
		secs := max(1, int(math.Ceil(wait.Seconds())))
		g.refuse(r, http.StatusTooManyRequests)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, "too many login attempts from this address; retry after %d s", secs)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", loginMaxBody)
			return
		}
		writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
		return
	}
	var b loginBody
	if err := decodeStrict(body, &b); err != nil {
		writeError(w, http.StatusBadRequest, "want {\"token\": \"...\"}: %v", err)
		return
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(b.Token)))
	if !g.known(sum) {
		g.refuse(r, http.StatusUnauthorized)
		w.Header().Set("WWW-Authenticate", `Bearer realm="troupe", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "the token is not one of this node's")
		return
	}
	// A login replaces the browser's session, if it had one.
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		g.sessions.end(c.Value)
	}
	id, sess, err := g.sessions.open(sum, time.Now())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "no session could be made: %v", err)
		return
	}
	setSessionCookies(w, r, id, sess.csrf, int(g.sessions.ttl/time.Second))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, LoginAnswer{CSRF: sess.csrf, ExpiresAt: sess.expires.UTC()})
}

// logout serves POST /v1/auth/logout (behind the gate): it ends the request's
// cookie session, if any, and clears the cookies.
func (g *gate) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		g.sessions.end(c.Value)
	}
	setSessionCookies(w, r, "", "", -1)
	w.WriteHeader(http.StatusNoContent)
}

// newLoginLimiters is the per-IP bucket of login attempts.
func newLoginLimiters() *limiters { return newLimiters(rate.Every(loginEvery), loginBurst) }
