package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// sessionEvents makes a completed session of n events: a task.submitted, n-2
// tool.completed whose results are result long, and a task.completed.
func sessionEvents(t *testing.T, session string, n, result int) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	add := func(p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.SessionID, e.Seq, e.Actor = session, seq, "session"
		e.ID, e.TS = fmt.Sprintf("%s/%d", session, seq), time.Now().UnixMicro()
		events = append(events, e)
	}
	add(&messages.TaskSubmitted{Input: "read the files"})
	for i := range n - 2 {
		add(&messages.ToolCallCompleted{Key: fmt.Sprintf("k%d", i), CallID: fmt.Sprintf("c%d", i), Tool: "files",
			Result: strings.Repeat("x", result)})
	}
	add(&messages.TaskCompleted{Output: "done"})
	return events
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// GET /v1/sessions/{id}/events?from=&limit= answers a page of the session's
// events; without them, all of them, as before.
func TestEventsPaging(t *testing.T) {
	log := openLog(t)
	events := sessionEvents(t, "paged-1", 25, 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := log.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	_, base, _ := serveHTTP(t, node.Config{Log: log})
	url := base + "/v1/sessions/paged-1/events"

	// Without paging: every event, the bytes writeJSON wrote before.
	stored, err := log.Read(ctx, "paged-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	_ = json.NewEncoder(&want).Encode(stored)
	if code, body := getBody(t, url); code != http.StatusOK || !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("all events: %d, %d bytes, want the %d bytes of json.Encoder", code, len(body), want.Len())
	}

	for _, c := range []struct {
		query      string
		first, end uint64 // seqs [first, end)
	}{
		{"", 1, 26},
		{"?from=1", 1, 26},
		{"?limit=10", 1, 11},
		{"?from=5&limit=10", 5, 15},
		{"?from=20&limit=10", 20, 26}, // a limit past the end
		{"?from=25&limit=1", 25, 26},
		{"?from=16", 16, 26},
		{"?from=26", 26, 26}, // past the end: []
		{"?from=1000&limit=5", 1000, 1000},
		{"?limit=10000", 1, 26},
	} {
		code, body := getBody(t, url+c.query)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.query, code, body)
		}
		var got []messages.Envelope
		if err := json.Unmarshal(body, &got); err != nil || got == nil {
			t.Fatalf("%s: %q is no array of events: %v", c.query, body, err)
		}
		var seqs []uint64
		for _, e := range got {
			seqs = append(seqs, e.Seq)
		}
		var wantSeqs []uint64
		for s := c.first; s < c.end; s++ {
			wantSeqs = append(wantSeqs, s)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(wantSeqs) {
			t.Fatalf("%s: seqs %v, want %v", c.query, seqs, wantSeqs)
		}
	}

	for _, q := range []string{"?from=0", "?from=-1", "?from=x", "?from=9223372036854775808",
		"?limit=0", "?limit=-5", "?limit=10001", "?limit=ten", "?from=2&limit=1.5"} {
		code, body := getBody(t, url+q)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "must be") {
			t.Fatalf("%s: %d %s, want 400 saying what the value must be", q, code, body)
		}
	}

	// An unknown session is 404, from any seq.
	for _, q := range []string{"", "?from=3", "?from=3&limit=2"} {
		if code, body := getBody(t, base+"/v1/sessions/paged-2/events"+q); code != http.StatusNotFound {
			t.Fatalf("unknown session%s: %d %s", q, code, body)
		}
		// A session whose ID the unknown one's starts with is not it.
		if code, body := getBody(t, base+"/v1/sessions/paged/events"+q); code != http.StatusNotFound {
			t.Fatalf("unknown session paged%s: %d %s", q, code, body)
		}
	}
}

// heldEvents serves one session's events from memory, so that reading them
// allocates nothing and what an answer allocates is its encoding's.
type heldEvents struct {
	eventlog.Log
	session string
	events  []messages.Envelope
}

func (l *heldEvents) Read(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	if sessionID == l.session && from >= 1 {
		if from > uint64(len(l.events)) {
			return nil, nil
		}
		return l.events[from-1:], nil
	}
	return l.Log.Read(ctx, sessionID, from)
}

// A large session's events are encoded to the client event by event: the
// answer, 16 MB here, is never built whole in memory (json.Encoder did, and
// allocated about twice the body growing its buffer).
func TestEventsAnswerIsStreamed(t *testing.T) {
	if raceEnabled {
		t.Skip("counts allocations, which the race detector's instrumentation adds to")
	}
	const session = "huge-1"
	events := sessionEvents(t, session, 2000, 8<<10)
	log := &heldEvents{Log: openLog(t), session: session, events: events}
	_, base, _ := serveHTTP(t, node.Config{Log: log})
	url := base + "/v1/sessions/" + session + "/events"

	get := func() int64 {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET events: %d, %v", resp.StatusCode, err)
		}
		return n
	}
	get() // the connection and the pools are set up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	size := get()
	runtime.ReadMemStats(&after)
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	if size < 16<<20 {
		t.Fatalf("the answer is %d bytes, want at least 16 MiB", size)
	}
	if allocated > size/8 {
		t.Fatalf("answering %d bytes of events allocated %d bytes, want under %d (an eighth of the body)", size, allocated, size/8)
	}
	t.Logf("%d bytes answered, %d allocated", size, allocated)
}

// GET /v1/sessions?updated_since= lists the sessions with an event in the range
// (the dashboard's charts read those), since= those started in it.
func TestListSessionsUpdatedSince(t *testing.T) {
	log := openLog(t)
	old := time.Now().Add(-72 * time.Hour).UnixMicro()
	events := sessionEvents(t, "long-ago", 3, 10) // started 72 h ago, ended now
	events[0].TS = old
	stale := sessionEvents(t, "stale", 3, 10) // started and ended 72 h ago
	for i := range stale {
		stale[i].TS = old + int64(i)
	}
	if err := log.Append(context.Background(), append(events, stale...)); err != nil {
		t.Fatal(err)
	}
	_, base, _ := serveHTTP(t, node.Config{Log: log})
	for q, want := range map[string]string{"since=24h": "", "updated_since=24h": "long-ago", "updated_since=96h": "long-ago stale",
		"updated_since=24h&since=96h": "long-ago"} {
		code, body := getBody(t, base+"/v1/sessions?sessions_only=true&"+q)
		var got []eventlog.SessionInfo
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		var ids []string
		for _, s := range got {
			ids = append(ids, s.ID)
		}
		slices.Sort(ids)
		if strings.Join(ids, " ") != want {
			t.Fatalf("%s: %v, want %q", q, ids, want)
		}
	}
	if code, body := getBody(t, base+"/v1/sessions?updated_since=yesterday"); code != http.StatusBadRequest {
		t.Fatalf("updated_since=yesterday: %d %s", code, body)
	}
}
