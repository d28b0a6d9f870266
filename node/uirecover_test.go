package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// gone serves h while it is up; while down, it drops every connection unanswered,
// as a node that was killed (or a proxy in front of one restarting) does.
type gone struct {
	h    http.Handler
	down atomic.Bool
}

func (g *gone) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.down.Load() {
		g.h.ServeHTTP(w, r)
		return
	}
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
	}
}

// errorShown is true while the page's error box is shown.
const errorShown = `!document.getElementById("error").hidden`

// A page that polls (the approvals page, the sessions list) shows the error of a
// poll the node did not answer, and takes it away once the node answers again:
// the list under it is current then, and an error left over from a restart would
// say it is not.
func TestDashboardTakesAwayAPollsErrorOnceTheNodeAnswersAgainInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-back", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-back")
	g := &gone{h: n.Handler()}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	base := srv.URL + "/ui/"
	b := newBrowser(t, bin)

	for _, page := range []string{"#/approvals", "?poll=1#/sessions"} {
		b.navigate(base + page)
		b.waitText("#main", "dash-back")
		g.down.Store(true)
		b.waitTrue("the error of a poll the node did not answer on "+page, errorShown)
		g.down.Store(false)
		b.waitTrue("the error taken away once the node answers again on "+page, "!("+errorShown+")")
		b.waitText("#main", "dash-back")
	}
}

// On a session's page, the reason typed for a call waiting for approval stays, and
// its box keeps the focus, while the session's other events come in live: each of
// them redraws the page's head, which held the answer's form.
func TestDashboardKeepsAReasonBeingTypedWhileEventsComeInChromium(t *testing.T) {
	bin := chromium(t)
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{
			{ID: "call_mail", Name: "send_email", Arguments: `{"to":"bob@example.com"}`},
			{ID: "call_gate", Name: "gate", Arguments: `{}`},
		}},
		{Content: "handled"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	open := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(open) }) }
	t.Cleanup(release)
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}, &gateTool{started: make(chan struct{}, 1), open: open}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email", "gate"}, Approvals: []string{"send_email"}}}})
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-typing", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-typing")
	// Served before the browser starts: its stream is closed before the server is.
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "#/sessions/dash-typing")
	b.waitText("#main", "Waiting for approval")
	b.typeInto("#main td input", "bob asked for it")

	release()
	b.waitText(".tree", "gate → opened")
	var kept struct {
		Value   string
		Focused bool
	}
	b.eval(`(() => { const i = document.querySelector("#main td input"); return {Value: i.value, Focused: document.activeElement === i}; })()`, &kept)
	if kept.Value != "bob asked for it" || !kept.Focused {
		t.Errorf("after an event came in, the reason box holds %q (focused: %v), want what was typed, focused", kept.Value, kept.Focused)
	}
	b.click("#main button.approve")
	b.waitText("#main", "approved: bob asked for it")
	if sent.Load() != 1 {
		t.Errorf("%d emails sent, want 1", sent.Load())
	}
}
