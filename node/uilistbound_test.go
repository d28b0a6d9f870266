package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// The sessions list shows the latest 200 sessions (it asks GET /v1/sessions for
// 200) and stays so while the feed pushes new ones: on a busy node a page left
// open took in every session the feed told of, and redrew them all on each
// change, until the next poll (a minute; ?poll sets it) cut the list back.
func TestDashboardSessionsListStaysBoundedInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}})
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "?poll=3600#/sessions")
	b.waitText("#main", "No sessions.")
	b.waitText("#sessions-count", "live")
	// In batches that the feed carries whole (a client more than 64 changes behind
	// is told to list again, which would cut the list back to 200 by itself).
	const sessions, batch = 260, 20
	for start := 0; start < sessions; start += batch {
		for i := start; i < start+batch; i++ {
			if _, err := n.Submit(context.Background(), node.Task{Input: "echo hi", SessionID: fmt.Sprintf("many-%03d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := start; i < start+batch; i++ {
			waitEnded(t, n, fmt.Sprintf("many-%03d", i))
		}
		b.waitTrue("the batch's latest session completed", fmt.Sprintf(`document.querySelector('#main tbody tr[data-session="many-%03d"] .badge.completed')`, start+batch-1))
	}
	var rows int
	b.eval(`document.querySelectorAll("#main tbody tr[data-session]").length`, &rows)
	if rows > 200 {
		t.Fatalf("the sessions list shows %d rows; it asks for the latest 200", rows)
	}
}
