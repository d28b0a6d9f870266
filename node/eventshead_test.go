package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// readTotal is a SQLite log that counts the payload bytes read of one session.
type readTotal struct {
	*sqlite.Log
	session string
	bytes   atomic.Int64
}

func (l *readTotal) note(sessionID string, events []messages.Envelope) {
	if sessionID == l.session {
		l.bytes.Add(int64(messages.PayloadBytes(events)))
	}
}

func (l *readTotal) Read(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, sessionID, from)
	l.note(sessionID, events)
	return events, err
}

func (l *readTotal) ReadN(ctx context.Context, sessionID string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, sessionID, from, n, maxBytes)
	l.note(sessionID, events)
	return events, err
}

// HEAD /v1/sessions/{id}/events (a monitor's check that a session is there) is
// answered with the headers the GET would have, from the first page of the
// session: net/http discards a HEAD answer's body, and the handler read every
// page of the session from the log and encoded every event only for it to be
// dropped (0.8 s for a session of 40 MB, as long as the GET itself).
func TestHeadOfSessionEventsReadsOnePage(t *testing.T) {
	const id, events, size = "head-big", 26, 256 << 10 // 6.5 MiB of payload
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readTotal{Log: base, session: id}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	var batch []messages.Envelope
	for seq := 1; seq <= events; seq++ {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session"
		batch = append(batch, e)
	}
	if err := lg.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	lg.bytes.Store(0)
	resp, err := http.Head(url + "/v1/sessions/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD events: %d %q, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if read := lg.bytes.Load(); read > 2<<20 {
		t.Errorf("HEAD events read %d bytes of the session from the log, want a page at most (the session holds %d)", read, events*size)
	}
	resp, err = http.Head(url + "/v1/sessions/head-none/events")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("HEAD events of no session: %d, want 404", resp.StatusCode)
	}
}
