package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// readSizes is a SQLite log (every capability of it, paged reads included) that
// keeps the most payload bytes one read of a session returned.
type readSizes struct {
	*sqlite.Log
	session  string
	mu       sync.Mutex
	most     int
	listings int // of the streams whose ID starts with a prefix
}

func (l *readSizes) note(sessionID string, events []messages.Envelope) {
	if sessionID != l.session {
		return
	}
	n := 0
	for _, e := range events {
		n += len(e.Payload)
	}
	l.mu.Lock()
	l.most = max(l.most, n)
	l.mu.Unlock()
}

func (l *readSizes) Read(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, sessionID, from)
	l.note(sessionID, events)
	return events, err
}

func (l *readSizes) ReadN(ctx context.Context, sessionID string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, sessionID, from, n, maxBytes)
	l.note(sessionID, events)
	return events, err
}

// Sessions counts the listings of the streams that start with a prefix.
func (l *readSizes) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Prefix != "" {
		l.mu.Lock()
		l.listings++
		l.mu.Unlock()
	}
	return l.Log.Sessions(ctx, f)
}

// mostRead returns the most payload bytes one read returned since the last call,
// and starts counting again.
func (l *readSizes) mostRead() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.most
	l.most = 0
	return n
}

// serveReadSizes serves a node whose log is a readSizes, over a new SQLite log,
// that keeps the most bytes read of session.
func serveReadSizes(t *testing.T, session string) (*readSizes, string) {
	t.Helper()
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readSizes{Log: base, session: session}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	return lg, url
}

// appendSession appends to lg, in one batch, the events 1 to n of session id,
// each with the payload of its seq.
func appendSession(t *testing.T, lg *readSizes, id string, n int, payload func(seq int) messages.Payload) {
	t.Helper()
	var batch []messages.Envelope
	for seq := 1; seq <= n; seq++ {
		e, err := messages.NewEnvelope(payload(seq))
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session", time.Now().UnixMicro()
		batch = append(batch, e)
	}
	if err := lg.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// streamIDs reads the stream of session id until it sent n events (or ended),
// and returns their IDs; the stream stays open until the test ends.
func streamIDs(ctx context.Context, t *testing.T, url, id string, n int) []string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+id+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(got) < n {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			got = append(got, v)
		}
	}
	return got
}

// A session's events are read from the log a page at a time for GET
// /v1/sessions/{id}/events and its stream, never whole: a client that does not
// read its answer holds a page of the node's memory until its write timeout.
// Before, each such client of a session of 20 MB held 20 MB, and a hundred of
// them took 3 GB. The pages are bounded by their bytes (big events come fewer to
// a page), and the answers are the same: every event once, in seq order.
func TestSessionEventsAreReadAPageAtATime(t *testing.T) {
	const id, events, size = "big-1", 26, 256 << 10 // 6.5 MiB of payload
	lg, url := serveReadSizes(t, id)

	appendSession(t, lg, id, events, func(seq int) messages.Payload {
		if seq == events {
			return &messages.TaskCompleted{Output: "done", Steps: 1}
		}
		return &messages.TaskSubmitted{Input: fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))}
	})
	lg.mostRead()
	const most = 2 << 20 // a page of about a MiB (4 events), well under the session's 6.5 MiB

	seqs := func(query string) []uint64 {
		t.Helper()
		resp, err := http.Get(url + "/v1/sessions/" + id + "/events" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got []messages.Envelope
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil {
			t.Fatalf("GET events%s: %d, or not a JSON array of events", query, resp.StatusCode)
		}
		var out []uint64
		for _, e := range got {
			out = append(out, e.Seq)
		}
		return out
	}
	want := func(from, to uint64) []uint64 {
		var out []uint64
		for s := from; s <= to; s++ {
			out = append(out, s)
		}
		return out
	}
	for query, w := range map[string][]uint64{
		"":                  want(1, events),
		"?from=3&limit=5":   want(3, 7),
		"?from=20&limit=50": want(20, events),
		"?from=27":          nil,
	} {
		if got := seqs(query); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("GET events%s: seqs %v, want %v", query, got, w)
		}
		if n := lg.mostRead(); n > most {
			t.Errorf("GET events%s: one read of the log returned %d bytes of payload, want at most %d (a page)", query, n, most)
		}
	}

	// The stream sends the same events, then waits for more: it is read up to
	// the last one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := streamIDs(ctx, t, url, id, events)
	if fmt.Sprint(got) != fmt.Sprint(want(1, events)) {
		t.Errorf("the stream sent the events %v, want 1 to %d", got, events)
	}
	if n := lg.mostRead(); n > most {
		t.Errorf("the stream: one read of the log returned %d bytes of payload, want at most %d (a page)", n, most)
	}

	// A client ahead of the log (its Last-Event-ID past the session's end) is
	// streamed what comes next: the session is known by one event of it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+id+"/stream", nil)
	req.Header.Set("Last-Event-ID", "1000")
	ahead, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ahead.Body.Close()
	if ahead.StatusCode != http.StatusOK {
		t.Errorf("the stream from Last-Event-ID 1000: %d, want 200", ahead.StatusCode)
	}
	if n := lg.mostRead(); n > size+1024 {
		t.Errorf("the stream from Last-Event-ID 1000: one read of the log returned %d bytes of payload, want an event's (%d)", n, size)
	}
}

// A page of a session's events past its end is [] and one of a stream the log
// does not have is 404, told by reading the stream's first event: the log's
// streams are not listed. They were, by the ID as a prefix, so that
// GET /v1/sessions/0/events?from=2 listed every session whose ID starts with 0
// (most of them: their IDs are UUIDv7) at each call.
func TestEventsPastTheEndListNoStreams(t *testing.T) {
	lg, url := serveReadSizes(t, "")
	appendSession(t, lg, "s-0", 1, func(int) messages.Payload { return &messages.TaskSubmitted{Input: "hi"} })
	for path, want := range map[string]int{"/v1/sessions/s-0/events?from=2": http.StatusOK, "/v1/sessions/s/events?from=2": http.StatusNotFound} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.listings != 0 {
		t.Errorf("the log's streams were listed by prefix %d times, want none", lg.listings)
	}
}

// A page of a session's events holds about a MiB of payload whatever its events'
// sizes: a session of 8 events of a few bytes, then 40 of 256 KiB, is read in
// pages of about a MiB. A page's size was guessed from the events before it, so
// that the page after the 8 small events was of 1000 events: the rest of the
// session, 10 MiB, at once.
func TestSessionEventPagesHoldAboutAMiBWhateverTheMix(t *testing.T) {
	const id, small, large, size = "mixed-1", 8, 40, 256 << 10
	lg, url := serveReadSizes(t, id)
	appendSession(t, lg, id, small+large, func(seq int) messages.Payload {
		if seq > small {
			return &messages.TaskSubmitted{Input: fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))}
		}
		return &messages.TaskSubmitted{Input: fmt.Sprintf("%010d", seq)}
	})
	lg.mostRead()
	const most = 2 << 20

	resp, err := http.Get(url + "/v1/sessions/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	var got []messages.Envelope
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || len(got) != small+large || got[len(got)-1].Seq != small+large {
		t.Fatalf("GET events: %d, %d events, %v; want 200 and %d events", resp.StatusCode, len(got), err, small+large)
	}
	if n := lg.mostRead(); n > most {
		t.Errorf("GET events: one read of the log returned %d bytes of payload, want at most %d (about a MiB a page)", n, most)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := len(streamIDs(ctx, t, url, id, small+large))
	if sent != small+large {
		t.Errorf("the stream sent %d events, want %d", sent, small+large)
	}
	if n := lg.mostRead(); n > most {
		t.Errorf("the stream: one read of the log returned %d bytes of payload, want at most %d (about a MiB a page)", n, most)
	}
}
