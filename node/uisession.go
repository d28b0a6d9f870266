package node

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
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
// Sign-ins are kept in the event log, each a stream of its own
// (eventlog.UISignInStreamPrefix + the hex SHA-256 of the cookie's ID:
// messages.UISignedIn, then messages.UISignedOut at logout), so that they outlive
// a restart and every node over the same log honours them: no sticky sessions
// behind a load balancer. Neither the cookie's value nor the token is written: the
// stream is named by the cookie ID's hash, the token by an HMAC keyed by the
// cookie ID (a reader of the log learns nothing of either), the CSRF value by its
// hash. A node holds the sign-ins it made or looked up in memory (at most
// maxUISessions) and reads a held one's stream again once it was read more than
// signInRefresh ago: a logout on another node ends it here within that time, an
// expiry at once. A cookie the node does not hold costs its client IP one of its
// look-ups (lookupBurst, then one every lookupEvery), so that made-up cookies
// cannot flood the log with reads.

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

// SignInStatus is the status a session listing gives a sign-in's stream: it is a
// stream of the log, not a session (eventlog.IsSession), and no task runs there.
const SignInStatus = "ui-signin"

// IsSignInStream reports whether a stream of the log holds a dashboard sign-in.
func IsSignInStream(id string) bool { return strings.HasPrefix(id, eventlog.UISignInStreamPrefix) }

// Login attempts: each client IP may make loginBurst at once, then one every
// loginEvery; past that, login answers 429 without looking at the token.
const (
	loginBurst = 10
	loginEvery = 6 * time.Second
	// Look-ups in the log of cookies the node does not hold: each client IP may
	// make lookupBurst at once (a browser's first page after a restart asks for a
	// few things at once), then one every lookupEvery; past that, 429.
	lookupBurst = 30
	lookupEvery = time.Second
	// maxUISessions bounds the sessions a node holds; past it the one that
	// expires first is dropped (its stream still has it).
	maxUISessions = 10000
	// signInRefresh is how long a held sign-in is used before its stream is read
	// again, for a logout on another node.
	signInRefresh = time.Second
	// loginMaxBody bounds POST /v1/auth/login's body.
	loginMaxBody = 4 << 10
	// idLen is the length of a session ID (randomID).
	idLen = 43
)

// uiSession is one dashboard login: the token it was made with (its SHA-256), the
// SHA-256 of the CSRF value its state-changing requests carry, and when it ends;
// ended once logged out. seq is the last event of its stream folded, read when the
// stream was last read.
type uiSession struct {
	token   [sha256.Size]byte
	csrf    [sha256.Size]byte
	expires time.Time
	ended   bool
	seq     uint64
	read    time.Time
}

// uiSessions are the logins of the dashboard: in the log when log is set (the
// node's), and those made or looked up here held in memory, by the SHA-256 of
// their session ID (the ID itself is kept by the browser only).
type uiSessions struct {
	ttl     time.Duration
	max     int
	refresh time.Duration
	// log keeps the sign-ins (nil: memory only); tokens are the SHA-256 of the
	// node's tokens, among which a sign-in read from the log finds its own.
	log    eventlog.Log
	tokens func() [][sha256.Size]byte
	logger *slog.Logger

	mu sync.Mutex
	m  map[[sha256.Size]byte]uiSession
}

func newUISessions(ttl time.Duration, max int, tokens func() [][sha256.Size]byte, logger *slog.Logger) *uiSessions {
	return &uiSessions{ttl: ttl, max: max, refresh: signInRefresh, tokens: tokens, logger: logger, m: map[[sha256.Size]byte]uiSession{}}
}

// randomID is 32 random bytes, base64url.
func randomID() (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// signInStream is the stream of the sign-in whose session ID hashes to k.
func signInStream(k [sha256.Size]byte) string {
	return eventlog.UISignInStreamPrefix + hex.EncodeToString(k[:])
}

// tokenMAC names the token with SHA-256 token to whoever holds the session ID id.
func tokenMAC(id string, token [sha256.Size]byte) []byte {
	m := hmac.New(sha256.New, []byte(id))
	m.Write(token[:])
	return m.Sum(nil)
}

// open starts a session for the token with SHA-256 token, records it in the log,
// and returns its ID and CSRF value.
func (s *uiSessions) open(ctx context.Context, token [sha256.Size]byte, now time.Time) (id, csrf string, sess uiSession, err error) {
	if id, err = randomID(); err != nil {
		return "", "", uiSession{}, err
	}
	if csrf, err = randomID(); err != nil {
		return "", "", uiSession{}, err
	}
	sess = uiSession{token: token, csrf: sha256.Sum256([]byte(csrf)), expires: now.Add(s.ttl), seq: 1, read: now}
	k := sha256.Sum256([]byte(id))
	if s.log != nil {
		in := &messages.UISignedIn{TokenMAC: hex.EncodeToString(tokenMAC(id, token)), CSRFHash: hex.EncodeToString(sess.csrf[:]),
			ExpiresUS: sess.expires.UnixMicro()}
		if err := s.append(ctx, k, 1, in, now); err != nil {
			return "", "", uiSession{}, err
		}
	}
	s.hold(k, sess, now)
	return id, csrf, sess, nil
}

// append writes p at seq of the stream of the sign-in whose ID hashes to k.
func (s *uiSessions) append(ctx context.Context, k [sha256.Size]byte, seq uint64, p messages.Payload, now time.Time) error {
	e, err := messages.NewEnvelope(p)
	if err != nil {
		return err
	}
	var b [12]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return err
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "uisignin-"+hex.EncodeToString(b[:]), signInStream(k), seq, now.UnixMicro(), "ui"
	if err := s.log.Append(ctx, []messages.Envelope{e}); err != nil {
		return fmt.Errorf("dashboard sign-in: %w", err)
	}
	return nil
}

// hold keeps sess in memory (a copy folded further, of a higher seq, stays); past
// s.max it first drops the sessions that ended, then the one that expires first.
func (s *uiSessions) hold(k [sha256.Size]byte, sess uiSession, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.m[k]
	if ok && old.seq > sess.seq {
		return
	}
	if !ok && len(s.m) >= s.max {
		s.sweep(now)
	}
	if !ok && len(s.m) >= s.max {
		var first [sha256.Size]byte
		var at time.Time
		for k, v := range s.m {
			if at.IsZero() || v.expires.Before(at) {
				first, at = k, v.expires
			}
		}
		delete(s.m, first)
	}
	s.m[k] = sess
}

// sweep drops the sessions that ended; s.mu is held.
func (s *uiSessions) sweep(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
}

// drop forgets the session whose ID hashes to k.
func (s *uiSessions) drop(k [sha256.Size]byte) {
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// lookup returns the session with ID id when it has not ended. A session held is
// read again from the log once it was read more than s.refresh ago; one not held
// is read from the log, after miss agreed (an error from miss is returned as is).
// A session read whose token is none of the node's is not one.
func (s *uiSessions) lookup(ctx context.Context, id string, now time.Time, miss func() error) (uiSession, bool, error) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	sess, held := s.m[k]
	s.mu.Unlock()
	if held && !now.Before(sess.expires) {
		s.drop(k)
		return uiSession{}, false, nil
	}
	if held && (sess.ended || s.log == nil || now.Sub(sess.read) < s.refresh) {
		return sess, !sess.ended, nil
	}
	if !held {
		if s.log == nil {
			return uiSession{}, false, nil
		}
		if err := miss(); err != nil {
			return uiSession{}, false, err
		}
	}
	events, err := s.log.Read(ctx, signInStream(k), sess.seq+1)
	if err != nil {
		return uiSession{}, false, fmt.Errorf("dashboard sign-in: %w", err)
	}
	for _, e := range events {
		if err := s.apply(&sess, id, e); err != nil {
			return uiSession{}, false, err
		}
	}
	if sess.seq == 0 || sess.token == ([sha256.Size]byte{}) || !now.Before(sess.expires) {
		// No such sign-in, one of a token the node no longer has, or one that expired.
		s.drop(k)
		return uiSession{}, false, nil
	}
	sess.read = now
	s.hold(k, sess, now)
	return sess, !sess.ended, nil
}

// apply folds an event of the stream of the sign-in with ID id into sess.
func (s *uiSessions) apply(sess *uiSession, id string, e messages.Envelope) error {
	p, err := e.Decode()
	if err != nil {
		return fmt.Errorf("dashboard sign-in %s: %w", e.SessionID, err)
	}
	switch v := p.(type) {
	case *messages.UISignedIn:
		mac, err1 := hex.DecodeString(v.TokenMAC)
		csrf, err2 := hex.DecodeString(v.CSRFHash)
		if err := errors.Join(err1, err2); err != nil || len(csrf) != sha256.Size {
			return fmt.Errorf("dashboard sign-in %s seq %d: %w: token_mac or csrf_hash is not a hex SHA-256 (%v)", e.SessionID, e.Seq, messages.ErrCorrupt, err)
		}
		// Every token of the node is tried, in constant time: which one it is
		// does not leak through the time taken.
		var found [sha256.Size]byte
		for _, t := range s.tokens() {
			ok := subtle.ConstantTimeCompare(tokenMAC(id, t), mac)
			subtle.ConstantTimeCopy(ok, found[:], t[:])
		}
		sess.token, sess.expires = found, time.UnixMicro(v.ExpiresUS)
		copy(sess.csrf[:], csrf)
	case *messages.UISignedOut:
		sess.ended = true
	default:
		return fmt.Errorf("dashboard sign-in %s seq %d: a %s event has no place there", e.SessionID, e.Seq, e.Type)
	}
	sess.seq = e.Seq
	return nil
}

// signInAttempts bounds the appends of one logout that find their seq taken.
const signInAttempts = 3

// end ends the session with ID id, for reason (messages.UISignedOut): in the log
// too, so that every node refuses it.
func (s *uiSessions) end(ctx context.Context, id, reason string, now time.Time) error {
	k := sha256.Sum256([]byte(id))
	if s.log == nil {
		s.drop(k)
		return nil
	}
	for range signInAttempts {
		events, err := s.log.Read(ctx, signInStream(k), 1)
		if err != nil {
			return fmt.Errorf("dashboard sign-in: %w", err)
		}
		if len(events) == 0 {
			s.drop(k) // no such sign-in: nothing to end
			return nil
		}
		last := events[len(events)-1]
		if last.Type == messages.TypeUISignedOut {
			s.drop(k)
			return nil
		}
		err = s.append(ctx, k, last.Seq+1, &messages.UISignedOut{Reason: reason}, now)
		if errors.Is(err, eventlog.ErrSeqConflict) {
			continue // another node wrote meanwhile: read again
		}
		if err != nil {
			return err
		}
		s.drop(k)
		return nil
	}
	return fmt.Errorf("dashboard sign-in: %d logouts in a row found their seq taken by another writer", signInAttempts)
}

// size is the number of sessions held.
func (s *uiSessions) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// lookupLimited is the error of a cookie look-up past its client's bucket.
type lookupLimited struct{ wait time.Duration }

func (e *lookupLimited) Error() string {
	return fmt.Sprintf("too many look-ups of unknown session cookies from this address; retry after %v", e.wait)
}

// sessionIDShaped reports whether v could be a session ID (randomID): others are
// not looked up.
func sessionIDShaped(v string) bool {
	if len(v) != idLen {
		return false
	}
	for _, c := range []byte(v) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// cookieSession is the session of the request's troupe_session cookie, when it
// is one that has not ended and its token is still one of the node's. Its error is
// a *lookupLimited, or says that the log could not be read.
func (g *gate) cookieSession(r *http.Request) (uiSession, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || !sessionIDShaped(c.Value) {
		return uiSession{}, false, nil
	}
	now := time.Now()
	sess, ok, err := g.sessions.lookup(r.Context(), c.Value, now, func() error {
		if wait, ok := g.lookups.allow("ip:"+g.clientIP(r), now); !ok {
			return &lookupLimited{wait: wait}
		}
		return nil
	})
	if err != nil || !ok || !g.known(sess.token) {
		return uiSession{}, false, err
	}
	return sess, true, nil
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
	sum := sha256.Sum256([]byte(got))
	return sameOrigin(r) && got != "" && subtle.ConstantTimeCompare(sum[:], sess.csrf[:]) == 1
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
	if wait, ok := g.logins.allow("ip:"+g.clientIP(r), time.Now()); !ok {
		secs := max(1, int(math.Ceil(wait.Seconds())))
		g.refuse(r, http.StatusTooManyRequests)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, "too many login attempts from this address; retry after %d s", secs)
		return
	}
	if r.ContentLength > loginMaxBody {
		// Refused before the body is read, as a task's: a login is a token.
		writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d", r.ContentLength, loginMaxBody)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", loginMaxBody)
		case errors.As(err, &netErr) && netErr.Timeout():
			writeError(w, http.StatusRequestTimeout, "the request body was not sent in time")
		default:
			writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
		}
		return
	}
	body = messages.TrimByteOrderMark(body)
	var b loginBody
	if err := decodeStrict(body, &b); err != nil {
		writeError(w, http.StatusBadRequest, "want {\"token\": \"...\"}: %v", err)
		return
	}
	// As an approval's: encoding/json takes the last of two tokens, and a
	// "Token" for "token", where a proxy or a log that reads the body takes
	// the first, or none.
	if err := checkKeys(body, []string{"token"}, false); err != nil {
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
	now := time.Now()
	if c, err := r.Cookie(SessionCookie); err == nil && sessionIDShaped(c.Value) {
		if err := g.sessions.end(r.Context(), c.Value, "replaced", now); err != nil {
			g.logger.Warn("dashboard login: the session it replaces is not ended: it lasts until it expires", "err", err)
		}
	}
	id, csrf, sess, err := g.sessions.open(r.Context(), sum, now)
	if err != nil {
		g.logger.Warn("dashboard login: no session could be made", "err", err)
		writeError(w, http.StatusServiceUnavailable, "no session could be made: %v", err)
		return
	}
	setSessionCookies(w, r, id, csrf, int(g.sessions.ttl/time.Second))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, LoginAnswer{CSRF: csrf, ExpiresAt: sess.expires.UTC()})
}

// logout serves POST /v1/auth/logout (behind the gate): it ends the request's
// cookie session, if any, on every node, and clears the cookies. When the end
// cannot be recorded it answers 503 and keeps the cookies, so that the browser can
// try again.
func (g *gate) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil && sessionIDShaped(c.Value) {
		if err := g.sessions.end(r.Context(), c.Value, "logout", time.Now()); err != nil {
			g.logger.Warn("dashboard logout: the session's end is not recorded", "err", err)
			writeError(w, http.StatusServiceUnavailable, "the logout could not be recorded, the session goes on: %v", err)
			return
		}
		g.cutSession(c.Value) // its streams on this node end
	}
	setSessionCookies(w, r, "", "", -1)
	w.WriteHeader(http.StatusNoContent)
}

// newLoginLimiters is the per-IP bucket of login attempts.
func newLoginLimiters() *limiters { return newLimiters(rate.Every(loginEvery), loginBurst) }

// newLookupLimiters is the per-IP bucket of look-ups of unknown cookies.
func newLookupLimiters() *limiters { return newLimiters(rate.Every(lookupEvery), lookupBurst) }
