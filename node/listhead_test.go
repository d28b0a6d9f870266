package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// workCount is a SQLite log that counts the reports it computes and the reads of
// sessions' events it serves.
type workCount struct {
	*sqlite.Log
	reports, reads atomic.Int64
}

func (l *workCount) Report(ctx context.Context, f eventlog.StatsFilter) (*eventlog.Stats, error) {
	l.reports.Add(1)
	return l.Log.Report(ctx, f)
}

func (l *workCount) Read(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	l.reads.Add(1)
	return l.Log.Read(ctx, sessionID, from)
}

func (l *workCount) ReadN(ctx context.Context, sessionID string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	l.reads.Add(1)
	return l.Log.ReadN(ctx, sessionID, from, n, maxBytes)
}

// HEAD /v1/stats and HEAD /v1/sessions?detail=true (a monitor's checks) were
// served as their GET: the report computed, every listed session's events read
// and folded, only for net/http to drop the body. They are answered with the
// GET's status and Content-Type and nothing computed for the body, as HEAD of a
// session's events is; a bad parameter is still 400, and the GETs still answer.
func TestHeadOfStatsAndSessionDetailComputesNoBody(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &workCount{Log: base}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})
	for i := range 5 {
		id := fmt.Sprintf("head-list-%d", i)
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor = id+"/1", id, 1, "session"
		if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	head := func(path string) int {
		t.Helper()
		resp, err := http.Head(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("HEAD %s: Content-Type %q, want application/json", path, resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode
	}
	lg.reports.Store(0)
	if code := head("/v1/stats"); code != http.StatusOK {
		t.Errorf("HEAD /v1/stats: %d, want 200", code)
	}
	if n := lg.reports.Load(); n != 0 {
		t.Errorf("HEAD /v1/stats computed %d reports, want none", n)
	}
	if code := head("/v1/stats?since=yesterday-ish"); code != http.StatusBadRequest {
		t.Errorf("HEAD /v1/stats with a bad since: %d, want 400", code)
	}
	lg.reads.Store(0)
	if code := head("/v1/sessions?detail=true"); code != http.StatusOK {
		t.Errorf("HEAD /v1/sessions?detail=true: %d, want 200", code)
	}
	if n := lg.reads.Load(); n != 0 {
		t.Errorf("HEAD /v1/sessions?detail=true read sessions' events %d times, want none", n)
	}
	if code := head("/v1/sessions?detail=maybe"); code != http.StatusBadRequest {
		t.Errorf("HEAD /v1/sessions?detail=maybe: %d, want 400", code)
	}
	// The GETs do the work and answer it.
	var rows []node.SessionRow
	if code := getJSON(t, url+"/v1/sessions?detail=true", &rows); code != http.StatusOK || len(rows) != 5 {
		t.Errorf("GET /v1/sessions?detail=true: %d, %d rows, want 200 and 5", code, len(rows))
	}
	if lg.reads.Load() == 0 {
		t.Error("GET /v1/sessions?detail=true read no session's events")
	}
	var stats map[string]any
	if code := getJSON(t, url+"/v1/stats", &stats); code != http.StatusOK || lg.reports.Load() != 1 {
		t.Errorf("GET /v1/stats: %d, %d reports, want 200 and 1", code, lg.reports.Load())
	}
}

// downLog is a SQLite log whose reads fail, as a log that is down.
type downLog struct{ *sqlite.Log }

var errLogDown = errors.New("the log is down")

func (downLog) Report(context.Context, eventlog.StatsFilter) (*eventlog.Stats, error) {
	return nil, errLogDown
}

func (downLog) Sessions(context.Context, eventlog.Filter) ([]eventlog.SessionInfo, error) {
	return nil, errLogDown
}

// HEAD /v1/stats answered 200 without asking the log, where the GET is 500 with
// the log down: a monitor checking it with HEAD read the stats as served. It
// asks the log (a list of one session) and answers the GET's 500 when that
// fails, as HEAD /v1/sessions does.
func TestHeadOfStatsOnAFailingLogIsTheGETsStatus(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	_, url, _ := serveHTTP(t, node.Config{Log: downLog{base}})
	for _, path := range []string{"/v1/stats", "/v1/sessions?detail=true"} {
		get, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = get.Body.Close()
		head, err := http.Head(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = head.Body.Close()
		if get.StatusCode != http.StatusInternalServerError || head.StatusCode != get.StatusCode {
			t.Errorf("%s with the log down: GET %d, HEAD %d; want both 500", path, get.StatusCode, head.StatusCode)
		}
	}
}
