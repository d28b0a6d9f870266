package node_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// countedReads is a log that counts the events its reads return.
type countedReads struct {
	eventlog.Log
	events atomic.Int64
}

func (l *countedReads) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, session, from)
	l.events.Add(int64(len(events)))
	return events, err
}

// GET /v1/sessions?detail=true, which the dashboard fetches again every minute,
// reads of each listed session only what it appended since the last listing (and
// the few events before, checked again), not its whole history: listing long
// sessions again read every one of their events each time. The rows are those a
// node that never listed them gives, before and after the sessions go on.
func TestSessionListDetailReadsOnlyWhatIsNew(t *testing.T) {
	log := &countedReads{Log: sharedLog(t)}
	n := nodetest.Start(t, node.Config{Log: log})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	const sessions, tasks = 3, 12
	for s := range sessions {
		for i := range tasks {
			nodetest.Run(t, n, fmt.Sprintf("long-%d", s), fmt.Sprintf("What is %d * (7 + 5)?", i+1))
		}
	}
	list := func(url string) []node.SessionRow {
		t.Helper()
		var rows []node.SessionRow
		if code := getJSON(t, url+"/v1/sessions?detail=true&sessions_only=true", &rows); code != http.StatusOK || len(rows) != sessions {
			t.Fatalf("GET /v1/sessions?detail=true: %d, %d rows", code, len(rows))
		}
		return rows
	}
	// What a node that never listed them says (its folds start empty).
	fresh := func() []node.SessionRow {
		t.Helper()
		other := nodetest.Start(t, node.Config{Log: log.Log})
		osrv := httptest.NewServer(other.Handler())
		defer osrv.Close()
		return list(osrv.URL)
	}

	first := list(srv.URL)
	if first[0].Steps == 0 || first[0].Usage.PromptTokens == 0 {
		t.Fatalf("rows: %+v", first)
	}
	log.events.Store(0)
	again := list(srv.URL)
	if !reflect.DeepEqual(again, first) {
		t.Fatalf("listed again:\n%+v\nwant\n%+v", again, first)
	}
	whole := int64(0)
	for _, r := range first {
		whole += int64(r.Events)
	}
	if read := log.events.Load(); read > sessions*16 {
		t.Fatalf("listing again read %d events of the sessions' %d", read, whole)
	}

	nodetest.Run(t, n, "long-1", "What is 99 * (7 + 5)?")
	after := list(srv.URL)
	if want := fresh(); !reflect.DeepEqual(after, want) {
		t.Fatalf("listed after a new task:\n%+v\nwant, as a node that never listed them:\n%+v", after, want)
	}
	var grown bool
	for i := range after {
		if after[i].ID == "long-1" {
			grown = after[i].Usage.PromptTokens > first[i].Usage.PromptTokens
		}
	}
	if !grown {
		t.Fatalf("long-1's usage did not grow with its new task: %+v then %+v", first, after)
	}
}
