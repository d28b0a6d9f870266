package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// rowWith is a JavaScript expression for the row of the dashboard's approvals
// table whose text contains s (null when none does).
func rowWith(s string) string {
	q, _ := json.Marshal(s)
	return fmt.Sprintf(`[...document.querySelectorAll("#main tbody tr")].find((r) => r.textContent.includes(%s))`, q)
}

// reasonKept is what a row's reason box holds, whether it has the focus, and
// where its selection is.
type reasonKept struct {
	Value      string
	Focused    bool
	Start, End int
}

// keptReason reads the reason box of the row whose text contains s.
func keptReason(b *browser, s string) reasonKept {
	b.t.Helper()
	var kept reasonKept
	b.eval(`(() => { const i = (`+rowWith(s)+`).querySelector("input"); return {Value: i.value, Focused: document.activeElement === i, Start: i.selectionStart, End: i.selectionEnd}; })()`, &kept)
	return kept
}

// typeReason types reason into the reason box of the row whose text contains s
// and selects its characters from 4 to 9, as a user about to retype a word does.
func typeReason(b *browser, s, reason string) {
	b.t.Helper()
	b.waitTrue("the row of "+s, rowWith(s))
	b.eval(`(`+rowWith(s)+`).querySelector("input").focus()`, nil)
	b.call(b.session, "Input.insertText", map[string]any{"text": reason}, nil)
	b.eval(`(`+rowWith(s)+`).querySelector("input").setSelectionRange(4, 9)`, nil)
}

// On the approvals page, the reason typed for a call stays, with its box's focus
// and selection, when another session's call comes to wait too: the list changed,
// and the table, drawn again, lost what was typed; Approve then sent the call out
// with no reason.
func TestDashboardApprovalsPageKeepsAReasonWhenAnotherCallArrivesInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-first", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-first")
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "#/approvals")
	b.waitText("#main", "dash-first")
	typeReason(b, "dash-first", "bob asked for it")

	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-second", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-second")
	b.waitText("#main", "dash-second")
	want := reasonKept{Value: "bob asked for it", Focused: true, Start: 4, End: 9}
	if kept := keptReason(b, "dash-first"); kept != want {
		t.Errorf("after another call came to wait, the reason box holds %+v, want %+v", kept, want)
	}
	if kept := keptReason(b, "dash-second"); kept.Value != "" {
		t.Errorf("the new call's reason box holds %q, want nothing", kept.Value)
	}
	b.eval(`(`+rowWith("dash-first")+`).querySelector("button.approve").click()`, nil)
	b.waitTrue("the first call answered", "!("+rowWith("dash-first")+")")
	waitEnded(t, n, "dash-first")
	b.navigate(base + "#/sessions/dash-first")
	b.waitText("#main", "approved: bob asked for it")
}

// On a session's page with two calls waiting, the reason typed for one stays,
// with its box's focus and selection, when the other is answered elsewhere; a
// call answered drops its row and what was typed in it.
func TestDashboardSessionPageKeepsAReasonWhenAnotherCallIsAnsweredInChromium(t *testing.T) {
	bin := chromium(t)
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{
			{ID: "call_bob", Name: "send_email", Arguments: `{"to":"bob@example.com"}`},
			{ID: "call_carol", Name: "send_email", Arguments: `{"to":"carol@example.com"}`},
		}},
		{Content: "handled"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail both", SessionID: "dash-two", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	var bob string
	waitFor(t, 30*time.Second, "both calls waiting", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if strings.Contains(p.Arguments, "bob") {
				bob = p.Key
			}
		}
		return len(list) == 2
	})
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "#/sessions/dash-two")
	b.waitText("#main", "carol@example.com")
	typeReason(b, "bob@example.com", "a reason for bob")
	typeReason(b, "carol@example.com", "carol asked for it")

	if err := n.Approve(context.Background(), "dash-two", bob, true, "", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	b.waitTrue("bob's call gone from the list", "!("+rowWith("bob@example.com")+")")
	want := reasonKept{Value: "carol asked for it", Focused: true, Start: 4, End: 9}
	if kept := keptReason(b, "carol@example.com"); kept != want {
		t.Errorf("after the other call was answered, the reason box holds %+v, want %+v", kept, want)
	}
	b.eval(`(`+rowWith("carol@example.com")+`).querySelector("button.approve").click()`, nil)
	b.waitText("#main", "approved: carol asked for it")
	waitEnded(t, n, "dash-two")
	if sent.Load() != 2 {
		t.Errorf("%d emails sent, want 2", sent.Load())
	}
}

// holdList holds GET /v1/approvals while held is open: the approvals page's
// poll waits, so that its table still shows a call answered meanwhile.
type holdList struct {
	h    http.Handler
	mu   sync.Mutex
	held chan struct{}
}

func (g *holdList) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held != nil && r.Method == http.MethodGet && r.URL.Path == "/v1/approvals" {
		select {
		case <-held:
		case <-r.Context().Done():
			return
		}
	}
	g.h.ServeHTTP(w, r)
}

func (g *holdList) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *holdList) release() {
	g.mu.Lock()
	close(g.held)
	g.held = nil
	g.mu.Unlock()
}

// An Approve clicked on a call answered elsewhere meanwhile is refused (409): the
// page says so, naming the call, and takes the error away when the next list no
// longer has the call and its row goes. It stayed until some later answer went
// through, about a call the page no longer showed.
func TestDashboardTakesAwayARefusedAnswersErrorWithItsRowInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-409", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	p := waitApproval(t, n, "dash-409")
	g := &holdList{h: n.Handler()}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	b := newBrowser(t, bin)
	b.navigate(srv.URL + "/ui/#/approvals")
	b.waitText("#main", "dash-409")

	g.hold()
	if code, msg := postJSON(t, srv.URL+"/v1/sessions/dash-409/approvals/"+url.PathEscape(p.Key), `{"approve":false,"reason":"elsewhere"}`); code != http.StatusAccepted {
		t.Fatalf("the answer from elsewhere: %d %s", code, msg)
	}
	b.click("button.approve")
	b.waitTrue("the refused answer's error", errorShown+` && document.getElementById("error").innerText.includes("409")`)
	var text string
	b.eval(`document.getElementById("error").innerText`, &text)
	if !strings.Contains(text, "send_email") || !strings.Contains(text, "dash-409") {
		t.Errorf("the error does not say which call it is about: %q", text)
	}
	g.release()
	b.waitTrue("the call's row gone", `document.querySelector("button.approve") === null`)
	b.waitTrue("the error gone with its row", "!("+errorShown+")")
}
