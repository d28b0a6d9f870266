package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// The dashboard's Log out ends its session: a stream the page opened with the
// session's cookie (the feed of sessions) must end with it, or a browser (or a
// stolen cookie) keeps reading after the logout.
func TestLogoutEndsTheSessionsStreams(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}, SessionTTL: time.Hour}})
	resp, body, cookies := login(t, base, goodToken, nil)
	var ans node.LoginAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	session := cookies[node.SessionCookie].Value
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ended := feedWithCookie(ctx, t, base, session)
	if code, b := withCookie(t, "POST", base+"/v1/auth/logout", session, "", map[string]string{node.CSRFHeader: ans.CSRF}); code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", code, b)
	}
	if code, _ := withCookie(t, "GET", base+"/v1/sessions", session, "", nil); code != http.StatusUnauthorized {
		t.Fatalf("the cookie after the logout: %d, want 401", code)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the feed opened with the cookie is still open after the logout")
	}
}

// feedWithCookie opens the feed of sessions with the session's cookie, reads it
// to its end, and returns a channel closed at that end.
func feedWithCookie(ctx context.Context, t *testing.T, base, session string) <-chan struct{} {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/feed/sessions", nil)
	req.AddCookie(&http.Cookie{Name: node.SessionCookie, Value: session})
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.Body.Close() })
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("the feed with the cookie: %d", stream.StatusCode)
	}
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, stream.Body); close(ended) }()
	return ended
}

// A stream the dashboard opened with its session's cookie ends when the session
// expires, as at a logout: the cookie is refused from then on (401), and a stream
// that went on would keep a browser (or a stolen cookie) reading the node's
// sessions past the sign-in's end for as long as its connection lasts.
func TestSignInExpiryEndsTheSessionsStreams(t *testing.T) {
	const ttl = 2 * time.Second
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}, SessionTTL: ttl}})
	resp, body, cookies := login(t, base, goodToken, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	session := cookies[node.SessionCookie].Value
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended := feedWithCookie(ctx, t, base, session)
	select {
	case <-ended:
	case <-time.After(ttl + 10*time.Second):
		code, _ := withCookie(t, "GET", base+"/v1/sessions", session, "", nil)
		t.Errorf("the feed opened with the cookie is still open 10 s after the session expired (the cookie now gets %d)", code)
	}
}
