package node_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// TestMemoryTimestampBeforeYearOneIsRefused: a timestamp RFC 3339 can write but
// that lies before the year 1 in UTC ("0000-01-01T00:00:00+01:00" is 31 December
// of the year -1) was stored, and from then on every search of its namespace
// answered 503: the memory's time cannot be written as JSON (Time.MarshalJSON:
// year outside of range [0,9999]). It is refused, naming the timestamp, and the
// namespace's searches go on answering.
func TestMemoryTimestampBeforeYearOneIsRefused(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	mn.mustPost(t, `{"namespace":"user:alice","tier":"episodic","content":"Alice moved to Lisbon"}`)
	for _, ts := range []string{"0000-01-01T00:00:00+01:00", "0000-06-01T00:00:00Z"} {
		code, ids, msg := mn.post(t, `[{"namespace":"user:bob","tier":"episodic","content":"fine"},{"namespace":"user:alice","tier":"episodic","content":"Alice was born","timestamp":"`+ts+`"}]`)
		if code != http.StatusBadRequest || ids != nil || !strings.Contains(msg, "timestamp") {
			t.Errorf("timestamp %s: %d %v %q, want 400 naming the timestamp", ts, code, ids, msg)
		}
	}
	if n := len(memoryEvents(t, mn.log, "user:bob")); n != 0 {
		t.Errorf("%d events written in user:bob by refused requests", n)
	}
	code, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"Alice"}})
	if code != http.StatusOK || len(ans.Results) != 1 {
		t.Fatalf("search after the refused writes: %d %+v", code, ans)
	}
	// The earliest time that is no "now" (the zero time is: a client's unset time).
	mn.mustPost(t, `{"namespace":"user:alice","tier":"episodic","content":"The year 1","timestamp":"0001-01-01T00:00:01Z"}`)
	if code, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"year"}}); code != http.StatusOK || len(ans.Results) == 0 {
		t.Fatalf("search: %d %+v", code, ans)
	}
}
