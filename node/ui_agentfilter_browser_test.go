package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// The dashboard's agent filter lists that agent's sessions however many newer
// sessions other agents have: it filtered the latest 200 sessions of all in the
// page, and showed "No sessions." for an agent whose sessions are older.
func TestDashboardAgentFilterFindsOlderSessionsInChromium(t *testing.T) {
	bin := chromium(t)
	log := openLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := time.Now().Add(-time.Hour).UnixMicro()
	for i := range 2 {
		if err := log.Append(ctx, agentSession(t, fmt.Sprintf("research-%d", i), "researcher", base+int64(i)*1000)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 230 {
		if err := log.Append(ctx, agentSession(t, fmt.Sprintf("chat-%03d", i), "", base+int64(10+i)*1000)); err != nil {
			t.Fatal(err)
		}
	}
	n := nodetest.Start(t, node.Config{Log: log, Model: llm.Offline{}})
	b := newBrowser(t, bin)
	b.navigate(serveUI(t, n.Handler()) + "?poll=3600#/sessions")
	b.waitTrue("the latest sessions listed", `document.querySelector('#main tbody tr[data-session="chat-229"]') !== null`)
	b.typeInto(".filters input[list=agents]", "researcher")
	b.waitTrue("the researcher's sessions listed", `document.querySelector('#main tbody tr[data-session="research-0"]') !== null &&
		document.querySelector('#main tbody tr[data-session="research-1"]') !== null &&
		document.querySelectorAll('#main tbody tr[data-session]').length === 2`)
	b.waitText("#sessions-count", "2 shown")
	// A value that names no agent shows no session (the node, which refuses it,
	// is not asked).
	b.typeInto(".filters input[list=agents]", " X")
	b.waitText("#main", "No sessions.")
	var shown bool
	b.eval(`!document.getElementById("error").hidden`, &shown)
	if shown {
		t.Fatal("the page shows an error for an agent filter that names no agent")
	}
}
