package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// login posts the token to /v1/auth/login with the extra headers and returns the
// answer and its cookies by name.
func login(t *testing.T, base, token string, extra map[string]string) (*http.Response, string, map[string]*http.Cookie) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/auth/login", strings.NewReader(`{"token":"`+token+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	cookies := map[string]*http.Cookie{}
	for _, c := range resp.Cookies() {
		cookies[c.Name] = c
	}
	return resp, string(b), cookies
}

// withCookie makes a request signed in by the session cookie only, with the
// extra headers, and returns its status and body.
func withCookie(t *testing.T, method, url, session, body string, extra map[string]string) (int, string) {
	t.Helper()
	hdr := map[string]string{"Cookie": (&http.Cookie{Name: node.SessionCookie, Value: session}).String()}
	for k, v := range extra {
		hdr[k] = v
	}
	code, _, b := rawCall(t, method, url, body, hdr)
	return code, b
}

// A login with a right token sets an HttpOnly, SameSite=Strict session cookie
// that is not the token, for the session's lifetime, and a CSRF cookie the page
// can read; the cookie then signs requests in as the token did; logout ends it.
func TestDashboardLoginSetsASessionCookieAndLogoutEndsIt(t *testing.T) {
	n, base, logs := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}, SessionTTL: time.Hour}})
	resp, body, cookies := login(t, base, goodToken, nil)
	var ans node.LoginAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || ans.CSRF == "" {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	if until := time.Until(ans.ExpiresAt); until <= 0 || until > time.Hour {
		t.Errorf("the session ends in %v, want within the hour of SessionTTL", until)
	}
	sess, csrf := cookies[node.SessionCookie], cookies[node.CSRFCookie]
	if sess == nil || csrf == nil {
		t.Fatalf("login set the cookies %v", resp.Header["Set-Cookie"])
	}
	if !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" || sess.Secure || sess.MaxAge != 3600 {
		t.Errorf("the session cookie: %+v, want HttpOnly, SameSite=Strict, Path=/, Max-Age=3600, not Secure over plain HTTP", sess)
	}
	if csrf.HttpOnly || csrf.Value != ans.CSRF || csrf.SameSite != http.SameSiteStrictMode {
		t.Errorf("the CSRF cookie: %+v, want the answer's csrf, readable by the page", csrf)
	}
	if sess.Value == "" || strings.Contains(sess.Value, goodToken) || strings.Contains(body, goodToken) || strings.Contains(logs.String(), goodToken) {
		t.Errorf("the token travels back: cookie %q, body %s", sess.Value, body)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the login's answer may be cached: %q", resp.Header.Get("Cache-Control"))
	}
	// Behind a TLS proxy the cookies are Secure.
	if _, _, c := login(t, base, goodToken, map[string]string{"X-Forwarded-Proto": "https"}); c[node.SessionCookie] == nil ||
		!c[node.SessionCookie].Secure || !c[node.CSRFCookie].Secure {
		t.Errorf("cookies over X-Forwarded-Proto https: %+v", c)
	}

	if code, body := withCookie(t, "GET", base+"/v1/sessions", sess.Value, "", nil); code != http.StatusOK {
		t.Errorf("GET /v1/sessions with the cookie: %d %s", code, body)
	}
	// A second login from the same browser replaces its session.
	_, _, again := login(t, base, goodToken, map[string]string{"Cookie": node.SessionCookie + "=" + sess.Value})
	if again[node.SessionCookie] == nil || again[node.SessionCookie].Value == sess.Value {
		t.Fatalf("a second login: %+v", again)
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess.Value, "", nil); code != http.StatusUnauthorized {
		t.Errorf("the session a second login replaced: %d, want 401", code)
	}
	sess = again[node.SessionCookie]
	ans.CSRF = again[node.CSRFCookie].Value
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", "not-a-session", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/sessions with a made-up cookie: %d, want 401", code)
	}
	// A wrong bearer header is not rescued by a good cookie.
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess.Value, "", map[string]string{"Authorization": "Bearer " + wrongToken}); code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token beside the cookie: %d, want 401", code)
	}
	hdr := map[string]string{node.CSRFHeader: ans.CSRF, "Sec-Fetch-Site": "same-origin"}
	if code, body := withCookie(t, "POST", base+"/v1/tasks", sess.Value, `{"input":"hello","session_id":"by-cookie"}`, hdr); code != http.StatusAccepted {
		t.Errorf("POST /v1/tasks with the cookie and its csrf value: %d %s", code, body)
	}
	if code, body := withCookie(t, "POST", base+"/v1/auth/logout", sess.Value, "", hdr); code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", code, body)
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess.Value, "", nil); code != http.StatusUnauthorized {
		t.Errorf("the cookie after logout: %d, want 401", code)
	}
	waitFor(t, 30*time.Second, "the task posted with the cookie", func() bool {
		_, found, err := n.Status(context.Background(), "by-cookie")
		return err == nil && found
	})
}

// A state-changing request signed in by the cookie alone is refused (403, and
// nothing changes) without the session's CSRF value, with another one, and when
// the browser says another site's page sends it: a form another site posts with
// the cookie does not approve a call or submit a task.
func TestCookieRequestsWithoutTheCSRFValueAreRefused(t *testing.T) {
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	_, body, cookies := login(t, base, goodToken, nil)
	var ans node.LoginAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil || cookies[node.SessionCookie] == nil {
		t.Fatalf("login: %s", body)
	}
	sess := cookies[node.SessionCookie].Value
	for name, hdr := range map[string]map[string]string{
		"no csrf value":              nil,
		"another csrf value":         {node.CSRFHeader: ans.CSRF + "x"},
		"a cross-site page":          {node.CSRFHeader: ans.CSRF, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		"a same-site page elsewhere": {node.CSRFHeader: ans.CSRF, "Sec-Fetch-Site": "same-site"},
	} {
		if code, body := withCookie(t, "POST", base+"/v1/tasks", sess, `{"input":"hello","session_id":"csrf-1"}`, hdr); code != http.StatusForbidden {
			t.Errorf("POST /v1/tasks with %s: %d %s, want 403", name, code, body)
		}
		if code, body := withCookie(t, "DELETE", base+"/v1/kb/docs/documents?source=a.md", sess, "", hdr); code != http.StatusForbidden {
			t.Errorf("DELETE a document with %s: %d %s, want 403", name, code, body)
		}
	}
	// The form a hostile page posts: urlencoded, from another site, the cookie only.
	req, _ := http.NewRequest("POST", base+"/v1/sessions/s1/approvals/c1", strings.NewReader("approve=true"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.AddCookie(&http.Cookie{Name: node.SessionCookie, Value: sess})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site form post with the cookie: %d, want 403", resp.StatusCode)
	}
	if _, found, _ := n.Status(context.Background(), "csrf-1"); found {
		t.Error("a refused request submitted its task")
	}
	// Reading needs no CSRF value; a bearer token needs none either.
	if code, body := withCookie(t, "GET", base+"/v1/approvals", sess, "", nil); code != http.StatusOK {
		t.Errorf("GET /v1/approvals with the cookie: %d %s", code, body)
	}
	if code, _, body := doCall(t, "POST", base+"/v1/tasks", goodToken, `{"input":"hello","session_id":"csrf-2"}`); code != http.StatusAccepted {
		t.Errorf("POST /v1/tasks with the bearer token: %d %s", code, body)
	}
	// A login from another site's page is refused too.
	if resp, body, _ := login(t, base, goodToken, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site login: %d %s, want 403", resp.StatusCode, body)
	}
}

// A wrong token is answered 401 with a JSON error and no cookie; past the login
// bucket of its address every attempt, a right token too, is 429 with Retry-After.
func TestLoginRefusesWrongTokensAndIsRateLimited(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	var limited *http.Response
	for i := range 30 {
		resp, body, cookies := login(t, base, wrongToken, nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp
			if i < 5 {
				t.Errorf("limited after %d attempts", i)
			}
			break
		}
		var e struct{ Error string }
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" || len(cookies) != 0 {
			t.Fatalf("a wrong token: %d %s %v, want 401 with a JSON error and no cookie", resp.StatusCode, body, cookies)
		}
	}
	if limited == nil || limited.Header.Get("Retry-After") == "" {
		t.Fatalf("30 wrong logins from one address were never limited")
	}
	if resp, body, _ := login(t, base, goodToken, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token while the address is limited: %d %s, want 429", resp.StatusCode, body)
	}
	// The API itself is not limited by the login's bucket.
	if code, _, body := doCall(t, "GET", base+"/v1/sessions", goodToken, ""); code != http.StatusOK {
		t.Errorf("the API with a bearer token: %d %s", code, body)
	}
	for _, b := range []string{`{"token":1}`, `not json`, `{"token":"x","more":1}`} {
		req, _ := http.NewRequest("POST", base+"/v1/auth/login", strings.NewReader(b))
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("a text/plain login: %d, want 415", resp.StatusCode)
		}
	}
	// Without tokens there is nothing to log in to.
	_, open, _ := authNode(t, node.HTTPConfig{})
	if resp, body, _ := login(t, open, goodToken, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("a login to an open node: %d %s, want 409", resp.StatusCode, body)
	}
}

// A login body with its token twice, or under a miscased key, is refused (400),
// as an approval's or a task's is, with no cookie: encoding/json would take the
// last token, or "Token" for "token", which a proxy or a log reading the body
// would not.
func TestLoginRefusesDuplicateAndMiscasedKeys(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	for _, b := range []string{`{"token":"` + wrongToken + `","token":"` + goodToken + `"}`, `{"Token":"` + goodToken + `"}`, `{"TOKEN":"` + goodToken + `"}`} {
		code, _, body := rawCall(t, "POST", base+"/v1/auth/login", b, map[string]string{"Content-Type": "application/json"})
		if code != http.StatusBadRequest {
			t.Errorf("login %s: %d %s, want 400", b, code, body)
		}
	}
}

// The cookie stands for its token: a token dropped from the tokens file ends its
// sessions, and the cookie and the bearer header share the token's rate limit.
func TestSessionCookieFollowsItsToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(goodToken+"\n"+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{TokensFile: file, Rate: 0.01, Burst: 4}})
	_, body, cookies := login(t, base, goodToken, nil)
	if cookies[node.SessionCookie] == nil {
		t.Fatalf("login: %s", body)
	}
	sess := cookies[node.SessionCookie].Value
	for range 2 {
		if code, _, _ := doCall(t, "GET", base+"/v1/sessions", goodToken, ""); code != http.StatusOK {
			t.Fatalf("within the burst with the bearer token: %d", code)
		}
	}
	for range 2 {
		if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess, "", nil); code != http.StatusOK {
			t.Fatalf("within the burst with the cookie: %d", code)
		}
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess, "", nil); code != http.StatusTooManyRequests {
		t.Errorf("the cookie past the token's burst: %d, want 429", code)
	}
	if code, _, _ := doCall(t, "GET", base+"/v1/sessions", otherToken, ""); code != http.StatusOK {
		t.Errorf("another token: %d", code)
	}
	if err := os.WriteFile(file, []byte(otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", sess, "", nil); code != http.StatusUnauthorized {
		t.Errorf("the cookie of a dropped token: %d, want 401", code)
	}
}
