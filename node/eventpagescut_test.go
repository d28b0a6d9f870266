package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// failingPages is a SQLite log whose page reads of one session, once armed, fail
// at the failAt-th call, or answer an event whose payload is no JSON there
// (corrupt).
type failingPages struct {
	*sqlite.Log
	session string
	mu      sync.Mutex
	calls   int // page reads of session since arm; -1: not armed
	failAt  int
	corrupt bool
}

func (l *failingPages) arm(failAt int, corrupt bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls, l.failAt, l.corrupt = 0, failAt, corrupt
}

func (l *failingPages) ReadN(ctx context.Context, sessionID string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, sessionID, from, n, maxBytes)
	if sessionID != l.session || err != nil {
		return events, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls < 0 {
		return events, nil
	}
	if l.calls++; l.calls != l.failAt {
		return events, nil
	}
	if !l.corrupt {
		return nil, errors.New("the log's disk failed")
	}
	if len(events) > 0 {
		events[0].Payload = []byte("{not json")
	}
	return events, nil
}

// A session's events whose log read fails on a later page, after the answer's
// 200 and part of its JSON array were sent, are cut as a failed answer (the
// connection closes without the chunked body's end), so that the client sees an
// error, and so is the session's stream; an event that cannot be encoded cuts
// the array so too. Before, the answer ended as a whole one does: a truncated
// array, or a stream's end, that the client could not tell from all of the
// session's events.
func TestEventsCutByAFailedPageReadFailForTheClient(t *testing.T) {
	const id, events, size = "cut-1", 12, 256 << 10 // 3 pages of about a MiB
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &failingPages{Log: base, session: id, calls: -1}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	var batch []messages.Envelope
	for seq := 1; seq <= events; seq++ {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: fmt.Sprintf("%d %s", seq, strings.Repeat("x", size))})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session", time.Now().UnixMicro()
		batch = append(batch, e)
	}
	if err := lg.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}

	read := func(path string) (int, []byte, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	for _, c := range []struct {
		name    string
		corrupt bool
	}{{"a page read that fails", false}, {"an event that cannot be encoded", true}} {
		lg.arm(3, c.corrupt)
		code, body, err := read("/v1/sessions/" + id + "/events")
		if code != http.StatusOK || len(body) == 0 || err == nil {
			t.Errorf("GET events, %s on the 3rd page: %d, %d bytes, read error %v; want 200, part of the array, then an error", c.name, code, len(body), err)
		}
	}
	// The stream reads its first page, then the next ones before it waits
	// for live events: the 3rd read fails.
	lg.arm(3, false)
	code, body, err := read("/v1/sessions/" + id + "/stream")
	if code != http.StatusOK || !strings.Contains(string(body), "id: 1\n") || err == nil {
		t.Errorf("the stream, a page read that fails on the 3rd page: %d, %d bytes, read error %v; want 200, the first events, then an error", code, len(body), err)
	}
}
