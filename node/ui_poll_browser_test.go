package node_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A ?poll= of the sessions page that is no number of seconds from 1 to a day (0,
// negative, past what a browser timer holds) polls every 60 s (or a day), never in
// a loop: a timer of 0 or less, or of more than 2^31 ms, fires at once.
func TestDashboardPollOutOfRangeDoesNotLoopInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	var lists atomic.Int64
	api := n.Handler()
	base := serveUI(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/sessions" {
			lists.Add(1)
		}
		api.ServeHTTP(w, r)
	}))
	b := newBrowser(t, bin)
	for _, poll := range []string{"-1", "0.001", "3000000"} {
		b.navigate(base + "?poll=" + poll + "#/sessions")
		b.waitText("#main", "No sessions.")
		b.waitText("#sessions-count", "live")
		before := lists.Load()
		time.Sleep(time.Second)
		// The list is fetched on load and when the feed connects; a loop fetches it
		// hundreds of times a second.
		if got := lists.Load() - before; got > 5 {
			t.Errorf("?poll=%s: the page listed the sessions %d times in a second", poll, got)
		}
	}
}
