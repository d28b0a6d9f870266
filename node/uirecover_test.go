package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
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
