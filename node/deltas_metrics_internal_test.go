package node

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// A model answer that a watcher of deltas held the full deltaTailWait, because
// the end of its call's deltas from another node never came, is counted on the
// node's /metrics (troupe_deltas_tail_timeouts_total), which lists the series at
// 0 before.
func TestMetricsCountDeltaTailTimeouts(t *testing.T) {
	n, err := New(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for line := range strings.SplitSeq(rec.Body.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "troupe_deltas_tail_timeouts_total "); ok {
				return v
			}
		}
		t.Fatalf("/metrics has no troupe_deltas_tail_timeouts_total:\n%s", rec.Body.String())
		return ""
	}
	if v := scrape(); v != "0" {
		t.Fatalf("troupe_deltas_tail_timeouts_total = %s before any answer, want 0", v)
	}

	h := n.hub
	live, stop := h.watch("s", true)
	defer stop()
	w := h.subs["s"][0]
	h.mu.Lock()
	w.busDeltas = true // another node performs the session's calls: their ends come over the bus
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		w.busDeltas = false
		h.mu.Unlock()
	}()
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	h.deliverDeltas("s", "p", messages.ModelDelta{Key: "s/2", Step: 1, Seq: 1, Attempt: 1, Content: "partial "})
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2")}) // held: no end of the call's deltas comes
	deadline := time.After(10 * time.Second)
	for answered := false; !answered; {
		select {
		case e := <-live:
			answered = e.Type == messages.TypeModelResponded
		case <-deadline:
			t.Fatal("the held answer did not come within 10 s")
		}
	}
	if v := scrape(); v != "1" {
		t.Fatalf("troupe_deltas_tail_timeouts_total = %s after one answer held the full wait, want 1", v)
	}
}
