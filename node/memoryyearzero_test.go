package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
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

// TestMemoryStoredBeforeYearOneIsSearched: a namespace that already holds a
// memory dated before the year 1 (stored before such a timestamp was refused)
// answers its searches, that memory dated the year 1's first instant (and a
// warning logged), where every search of the namespace answered 503.
func TestMemoryStoredBeforeYearOneIsSearched(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	stream := memory.Stream("user:alice")
	var events []messages.Envelope
	for i, m := range []struct {
		id, content string
		at          time.Time
	}{
		{"m_1", "Alice moved to Lisbon", time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)},
		{"m_2", "Alice was born in Lisbon", time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC)},
	} {
		e, err := messages.NewEnvelope(&messages.MemoryAdded{Reason: "added", Memory: messages.MemoryRecord{MemoryID: m.id, Tier: "episodic",
			Content: m.content, Importance: 0.5, AtUS: m.at.UnixMicro(), Hash: pmem.ContentHash(m.content)}})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor = fmt.Sprintf("%s/%d", stream, i+1), stream, uint64(i+1), "session"
		e.TS = time.Date(2026, 5, 1, 0, 0, i, 0, time.UTC).UnixMicro()
		events = append(events, e)
	}
	if err := base.Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	logged := &syncBuffer{}
	mn := memoryNode{log: newCountingLog(base), emb: &countingEmbedder{}}
	mn.n = nodetest.Start(t, node.Config{Log: mn.log, Memory: &memory.Config{Embedder: mn.emb},
		Logger: slog.New(slog.NewTextHandler(logged, nil))})
	code, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"Alice Lisbon"}, "mode": {"keyword"}})
	if code != http.StatusOK || len(ans.Results) != 2 {
		t.Fatalf("search: %d %+v, want both memories", code, ans)
	}
	for _, r := range ans.Results {
		if r.ID == "m_2" && !r.Timestamp.Equal(time.Time{}) {
			t.Errorf("the memory dated the year -1 is answered with %s, want 0001-01-01T00:00:00Z", r.Timestamp)
		}
	}
	if !strings.Contains(logged.String(), "m_2") {
		t.Errorf("no warning names the memory; logged:\n%s", logged.String())
	}
}
