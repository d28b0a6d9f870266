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

// A session's events are read from the log a page at a time for GET
// /v1/sessions/{id}/events and its stream, never whole: a client that does not
// read its answer holds a page of the node's memory until its write timeout.
// Before, each such client of a session of 20 MB held 20 MB, and a hundred of
// them took 3 GB. The pages are bounded by their bytes (big events come fewer to
// a page), and the answers are the same: every event once, in seq order.
func TestSessionEventsAreReadAPageAtATime(t *testing.T) {
	const id, events, size = "big-1", 26, 256 << 10 // 6.5 MiB of payload
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readSizes{Log: base, session: id}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})

	var batch []messages.Envelope
	for seq := 1; seq <= events; seq++ {
		var p messages.Payload = &messages.TaskSubmitted{Input: fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))}
		if seq == events {
			p = &messages.TaskCompleted{Output: "done", Steps: 1}
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session", time.Now().UnixMicro()
		batch = append(batch, e)
	}
	if err := lg.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+id+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(got) < events {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			got = append(got, v)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want(1, events)) {
		t.Errorf("the stream sent the events %v, want 1 to %d", got, events)
	}
	if n := lg.mostRead(); n > most {
		t.Errorf("the stream: one read of the log returned %d bytes of payload, want at most %d (a page)", n, most)
	}

	// A client ahead of the log (its Last-Event-ID past the session's end) is
	// streamed what comes next: the session is known by one event of it.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+id+"/stream", nil)
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
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readSizes{Log: base}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.Actor, e.TS = "s-0/1", "s-0", 1, "session", time.Now().UnixMicro()
	if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
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
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readSizes{Log: base, session: id}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	var batch []messages.Envelope
	for seq := 1; seq <= small+large; seq++ {
		input := fmt.Sprintf("%010d", seq)
		if seq > small {
			input = fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))
		}
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session", time.Now().UnixMicro()
		batch = append(batch, e)
	}
	if err := lg.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+id+"/stream", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	sent := 0
	sc := bufio.NewScanner(stream.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && sent < small+large {
		if strings.HasPrefix(sc.Text(), "id: ") {
			sent++
		}
	}
	if sent != small+large {
		t.Errorf("the stream sent %d events, want %d", sent, small+large)
	}
	if n := lg.mostRead(); n > most {
		t.Errorf("the stream: one read of the log returned %d bytes of payload, want at most %d (about a MiB a page)", n, most)
	}
}
