package node_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// eventReads records the queries of the GET /v1/sessions/{id}/events requests
// that reach h, by session.
type eventReads struct {
	h  http.Handler
	mu sync.Mutex
	by map[string][]string
}

func (e *eventReads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/"); ok && strings.HasSuffix(rest, "/events") {
		e.mu.Lock()
		id := strings.TrimSuffix(rest, "/events")
		e.by[id] = append(e.by[id], r.URL.RawQuery)
		e.mu.Unlock()
	}
	e.h.ServeHTTP(w, r)
}

func (e *eventReads) of(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.by[id])
}

// The dashboard reads a session's events in pages of 2000: its timeline reads a
// long session page after page from seq 1 (drawing the first at once), never a
// session's events whole; and its charts read no session's events, but the sums
// of the range in buckets of time that the log makes (GET /v1/stats?buckets=).
// They read every event of up to 100 sessions (of one that began before the
// range, the pages back from its last event that reached into it).
func TestDashboardReadsEventsInPagesInChromium(t *testing.T) {
	bin := chromium(t)
	log := openLog(t)
	now := time.Now()
	// record records a completed session of n events, the first before at old
	// (µs apart), the others an hour ago.
	record := func(id string, n, before int, old time.Time) {
		var events []messages.Envelope
		for seq := 1; seq <= n; seq++ {
			var p messages.Payload = &messages.ToolCallCompleted{Key: fmt.Sprintf("k%d", seq), CallID: fmt.Sprintf("c%d", seq), Tool: "calculator", Result: "1", LatencyUS: 1000}
			switch seq {
			case 1:
				p = &messages.TaskSubmitted{Input: "count"}
			case n:
				p = &messages.TaskCompleted{Output: "counted"}
			}
			e, err := messages.NewEnvelope(p)
			if err != nil {
				t.Fatal(err)
			}
			ts := now.Add(-time.Hour)
			if seq <= before {
				ts = old
			}
			e.SessionID, e.Seq, e.Actor = id, uint64(seq), "session"
			e.ID, e.TS = fmt.Sprintf("%s/%d", id, seq), ts.UnixMicro()+int64(seq)
			events = append(events, e)
		}
		if err := log.Append(context.Background(), events); err != nil {
			t.Fatal(err)
		}
	}
	record("long-1", 4500, 0, time.Time{})              // all in the charts' range (24 h)
	record("old-1", 4500, 4400, now.Add(-72*time.Hour)) // its last 100 events only
	n := nodetest.Start(t, node.Config{Log: log})
	reads := &eventReads{h: n.Handler(), by: map[string][]string{}}
	base := serveUI(t, reads)
	b := newBrowser(t, bin)

	b.navigate(base + "#/sessions/long-1")
	if last := timelineEnd(b, 4500); !strings.Contains(last, "completed: counted") {
		t.Errorf("the timeline ends with %q, want event 4500, the task's end", last)
	}
	b.waitText("#events-count", "4,500")
	if got, want := reads.of("long-1"), []string{"from=1&limit=2000", "from=2001&limit=2000", "from=4001&limit=2000"}; !slices.Equal(got, want) {
		t.Errorf("the timeline read long-1's events with %q, want %q", got, want)
	}

	b.navigate(base + "#/charts")
	// The tool calls of the range: long-1's 4,498, and old-1's last 99.
	b.waitText("#main", "4,597 tool calls")
	b.waitTrue("a chart", `document.querySelector(".charts svg")`)
	if got := reads.of("old-1"); len(got) != 0 {
		t.Errorf("the charts read old-1's events with %q, want none", got)
	}
	if got, want := reads.of("long-1"), []string{"from=1&limit=2000", "from=2001&limit=2000", "from=4001&limit=2000"}; !slices.Equal(got, want) {
		t.Errorf("the timeline, then the charts read long-1's events with %q, want the timeline's %q only", got, want)
	}
}
