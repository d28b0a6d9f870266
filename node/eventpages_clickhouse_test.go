package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// chReads is the ClickHouse log, every capability of it, counting the whole
// reads (Read) and the page reads (ReadN) of one session.
type chReads struct {
	*clickhouse.Log
	session      string
	whole, pages atomic.Int64
}

func (l *chReads) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if id == l.session {
		l.whole.Add(1)
	}
	return l.Log.Read(ctx, id, from)
}

func (l *chReads) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	if id == l.session {
		l.pages.Add(1)
	}
	return l.Log.ReadN(ctx, id, from, n, maxBytes)
}

// A node without Kafka on the ClickHouse log, which owns the log (its writes go
// under its lease), reads a session's events a page at a time for GET
// /v1/sessions/{id}/events, as on SQLite: never whole.
func TestSessionEventsFromClickHouseAreReadInPages(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := chtest.Database(t, addr, "troupe_node_pages_")
	base, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	const id, events = "long-1", 2500
	var batch []messages.Envelope
	for seq := 1; seq <= events; seq++ {
		var p messages.Payload = &messages.ToolCallCompleted{Key: fmt.Sprint(seq), CallID: fmt.Sprint(seq), Tool: "clock", Result: strings.Repeat("x", 1000)}
		switch seq {
		case 1:
			p = &messages.TaskSubmitted{Input: "x"}
		case events:
			p = &messages.TaskCompleted{Output: "done", Steps: 1} // the session does not run
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", id, seq), id, uint64(seq), "session", time.Now().UnixMicro()
		e.CorrelationID = id + "/1"
		batch = append(batch, e)
	}
	if err := base.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	lg := &chReads{Log: base, session: id}
	_, url, _ := serveHTTP(t, node.Config{Log: lg})

	resp, err := http.Get(url + "/v1/sessions/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []messages.Envelope
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil {
		t.Fatalf("GET events: %d, or not a JSON array of events", resp.StatusCode)
	}
	if len(got) != events || got[0].Seq != 1 || got[events-1].Seq != events {
		t.Fatalf("GET events: %d events, want the session's %d", len(got), events)
	}
	if w, p := lg.whole.Load(), lg.pages.Load(); w != 0 || p < 3 {
		t.Errorf("GET events read the session whole %d times and in %d pages; want pages only, at least 3 (1,000 events a page)", w, p)
	}
}
