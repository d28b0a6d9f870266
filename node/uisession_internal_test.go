package node

import (
	"crypto/sha256"
	"testing"
	"time"
)

// A session lasts its TTL and no longer, and the sessions held stay within their
// bound: past it, the one that ends first is dropped.
func TestUISessionsEndAndStayBounded(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newUISessions(time.Hour, 3)
	tok := sha256.Sum256([]byte("a token of sixteen+"))
	first, sess, err := s.open(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.lookup(first, now.Add(time.Hour-time.Second)); !ok || got.token != tok || got.csrf != sess.csrf || got.csrf == first {
		t.Fatalf("the session before its end: %v %+v", ok, got)
	}
	if _, ok := s.lookup(first, now.Add(time.Hour)); ok {
		t.Error("the session is still there at its end")
	}
	ids := map[string]bool{}
	for i := range 5 {
		id, _, err := s.open(tok, now.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if ids[id] {
			t.Fatalf("session ID %q twice", id)
		}
		ids[id] = true
	}
	if s.size() != 3 {
		t.Errorf("%d sessions held, want the bound of 3", s.size())
	}
	kept := 0
	for id := range ids {
		if _, ok := s.lookup(id, now.Add(5*time.Minute)); ok {
			kept++
		}
	}
	if kept != 3 {
		t.Errorf("%d of the sessions answer, want the latest 3", kept)
	}
	s.end(first)
}
