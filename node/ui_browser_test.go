package node_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// chromium finds a headless-capable Chromium: TROUPE_TEST_CHROMIUM, else chromium
// or chromium-browser on PATH (Debian's chromium package; deploy/chromium.sh
// installs it). Without one the test is skipped, but fails in CI (CI=true).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TROUPE_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium found (set TROUPE_TEST_CHROMIUM, or run deploy/chromium.sh)")
	}
	t.Skip("no chromium found: install it (deploy/chromium.sh) or set TROUPE_TEST_CHROMIUM")
	return ""
}

// runChromium runs a headless Chromium on url with args, bounded in time, and
// returns its standard output.
func runChromium(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	// The page's console: a script error, or anything the policy refused (an
	// inline style, a script from elsewhere), fails the test.
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") && (strings.Contains(line, "Uncaught") || strings.Contains(line, "Content Security Policy")) {
			t.Errorf("chromium %s: the page logged: %s", url, line)
		}
	}
	return stdout.String()
}

// TestDashboardRendersASessionInChromium renders a recorded session that used a
// tool in a real browser and checks what the page shows: the session, the tool
// call, its result and the answer; and that the sessions list and the charts page
// render. TROUPE_UI_SCREENSHOT=path keeps a screenshot of the timeline there
// (docs/dashboard.png is made this way).
func TestDashboardRendersASessionInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	nodetest.Run(t, n, "dash-1", "What is 12 * (7 + 5)?")
	nodetest.Run(t, n, "dash-xss", `echo <img src=x onerror="document.title='owned'"><script>document.title='owned'</script>`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	})
	base := "http://" + ln.Addr().String() + "/ui/"

	dom := runChromium(t, bin, base+"#/sessions/dash-1", "--dump-dom")
	for _, want := range []string{
		`<span id="session-id">dash-1</span>`,
		`calculator({"expression":"12 * (7 + 5)"})`, // the call, with its arguments
		"calculator → 144",                          // its result
		`<div class="output" id="answer">`,          // the answer
		"completed",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the timeline has no %q:\n%s", want, dom)
		}
	}
	if !strings.Contains(dom, "144") || strings.Contains(dom, `class="error"`) && !strings.Contains(dom, `class="error" hidden`) {
		t.Errorf("the timeline shows an error or no answer:\n%s", dom)
	}

	// What a task, a model or a tool says is shown as text, never run.
	dom = runChromium(t, bin, base+"#/sessions/dash-xss/1", "--dump-dom")
	if !strings.Contains(dom, `echo &lt;img src=x onerror="document.title='owned'"&gt;&lt;script&gt;`) ||
		strings.Contains(dom, "<img") || strings.Contains(dom, "<title>owned") {
		t.Errorf("the task's text is not escaped:\n%s", dom)
	}
	// #/sessions/ID/SEQ shows that event's payload.
	if !strings.Contains(dom, `<h2>#1 task.submitted</h2>`) || !strings.Contains(dom, `"input": "echo &lt;img`) {
		t.Errorf("event 1's payload is not shown:\n%s", dom)
	}

	// The sessions list keeps its feed open: --dump-dom's virtual time would wait for
	// it forever, so a browser driven over the DevTools pipe reads it.
	b := newBrowser(t, bin)
	b.navigate(base + "#/sessions")
	b.waitTrue("dash-1 by the default agent in the sessions list",
		`document.querySelector('tr[data-session="dash-1"] a[href="#/sessions/dash-1"]')?.closest("tr").textContent.includes("default")`)
	dom = runChromium(t, bin, base+"#/charts", "--dump-dom")
	if !strings.Contains(dom, "<svg") || !strings.Contains(dom, "calculator") {
		t.Errorf("the charts page has no chart or no tool figures:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if p := os.Getenv("TROUPE_UI_SCREENSHOT"); p != "" {
		shot = p
	}
	runChromium(t, bin, base+"#/sessions/dash-1/5", "--screenshot="+shot, "--window-size=1200,720", "--hide-scrollbars")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 1000 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	}
}

// serveUI serves h on a loopback port for the test's lifetime and returns the
// dashboard's URL.
func serveUI(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/ui/"
}

// A call waiting for approval is listed with its buttons, and its running session's
// timeline renders while its stream stays open; a node that answers the API with
// 401 gets the token form.
func TestDashboardShowsApprovalsAndAsksForATokenInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-ap", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-ap")
	base := serveUI(t, n.Handler())

	dom := runChromium(t, bin, base+"#/approvals", "--dump-dom")
	for _, want := range []string{`href="#/sessions/dash-ap">dash-ap</a>`, "send_email", `{"to":"bob@example.com"}`,
		`<button class="approve" type="button">Approve</button>`, `<button class="reject" type="button">Reject</button>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the approvals page has no %q:\n%s", want, dom)
		}
	}
	dom = runChromium(t, bin, base+"#/sessions/dash-ap", "--dump-dom")
	for _, want := range []string{`<span class="badge running">running</span>`, "approval needed: send_email", "Waiting for approval", "● live"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the running session has no %q:\n%s", want, dom)
		}
	}
	if sent.Load() != 0 {
		t.Fatal("the email was sent without an answer")
	}

	// Behind a bearer token: the page asks for one.
	locked := http.NewServeMux()
	h := n.Handler()
	locked.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") != "Bearer s3cret" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, `{"error":"a bearer token is needed"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	dom = runChromium(t, bin, serveUI(t, locked)+"#/sessions", "--dump-dom")
	if !strings.Contains(dom, `<form id="token">`) || !strings.Contains(dom, "this node asks for a token: log in above") {
		t.Errorf("the token form is not shown on 401:\n%s", dom)
	}
}

// A delegate call links to the child session it started, and the child's page and
// the sessions list link back to the parent.
func TestDashboardLinksSubAgentSessionsInChromium(t *testing.T) {
	bin := chromium(t)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "the helper says 42"}},
		"helper": helperScript,
	})
	n := nodetest.Start(t, subagentsConfig(model))
	runAgentTask(t, n, node.Task{Input: "Ask the helper for 6*7.", SessionID: "boss", Agent: "lead", DeadlineMS: 60_000})
	base := serveUI(t, n.Handler())

	dom := runChromium(t, bin, base+"#/sessions/boss", "--dump-dom")
	if !strings.Contains(dom, `<a href="#/sessions/boss.sub4">child session boss.sub4</a>`) || !strings.Contains(dom, "the helper says 42") {
		t.Errorf("the parent's timeline has no link to its child:\n%s", dom)
	}
	dom = runChromium(t, bin, base+"#/sessions/boss.sub4", "--dump-dom")
	if !strings.Contains(dom, `<span>Parent</span><a href="#/sessions/boss">boss</a>`) || !strings.Contains(dom, "<div>helper</div>") &&
		!strings.Contains(dom, "<span>Agent</span>helper") {
		t.Errorf("the child's timeline has no link to its parent:\n%s", dom)
	}
}

// steppedModel answers as its script does, each call only once the test lets it
// through (release), so that the test decides when each step of a task happens.
type steppedModel struct {
	inner   llm.Model
	release chan struct{}
}

func (m *steppedModel) Name() string { return m.inner.Name() }

func (m *steppedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	select {
	case <-m.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return m.inner.Generate(ctx, r)
}

// step lets the model's next call through, once the model waits for it.
func (m *steppedModel) step(t *testing.T) {
	t.Helper()
	select {
	case m.release <- struct{}{}:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not called within 30 s")
	}
}

// With tokens on, the dashboard shows the login form; a wrong token is refused
// on the page, the right one typed in logs the browser in (a session cookie the
// page's scripts cannot read, the token kept nowhere), the sessions list renders,
// and Log out brings the form back.
func TestDashboardLogsInWithATokenInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}}})
	nodetest.Run(t, n, "dash-login", "What is 12 * (7 + 5)?")
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)

	b.navigate(base + "#/sessions")
	b.waitTrue("the login form", `!document.getElementById("token").hidden`)
	b.waitText("#error", "log in above")
	b.screenshot("login.png")
	b.typeInto("#token-input", wrongToken)
	b.click(`#token button[type="submit"]`)
	b.waitText("#error", "401 the token is not one of this node's")

	b.typeInto("#token-input", goodToken)
	b.click(`#token button[type="submit"]`)
	b.waitTrue("the sessions list with dash-1", `document.querySelector('a[href="#/sessions/dash-login"]')`)
	b.waitTrue("the form hidden and Log out shown", `document.getElementById("token").hidden && !document.getElementById("logout").hidden`)
	var seen struct {
		Cookie, Storage, Input string
	}
	b.eval(`({Cookie: document.cookie, Storage: JSON.stringify(sessionStorage) + JSON.stringify(localStorage), Input: document.getElementById("token-input").value})`, &seen)
	if strings.Contains(seen.Cookie, "troupe_session") || strings.Contains(seen.Cookie+seen.Storage+seen.Input, goodToken) || !strings.Contains(seen.Cookie, "troupe_csrf=") {
		t.Errorf("what the page's scripts can read after the login: %+v", seen)
	}
	b.screenshot("sessions.png")

	// A timeline is signed in by the cookie too, and so is an EventSource, which
	// cannot send a bearer header.
	b.click(`a[href="#/sessions/dash-login"]`)
	b.waitText("#main", "calculator → 144")
	var streamed string
	b.eval(`new Promise((done) => {
		const es = new EventSource("/v1/sessions/dash-login/stream");
		es.addEventListener("task.completed", (e) => { es.close(); done(JSON.parse(e.data).payload.output); });
		es.onerror = () => { es.close(); done("the stream failed"); };
	})`, &streamed)
	if !strings.Contains(streamed, "144") {
		t.Errorf("an EventSource signed in by the cookie: %q, want the answer", streamed)
	}

	b.click("#logout")
	b.waitTrue("the login form after Log out", `!document.getElementById("token").hidden && document.getElementById("logout").hidden`)
	b.navigate("about:blank")
	b.navigate(base + "#/approvals")
	b.waitTrue("the login form on a new page load", `!document.getElementById("token").hidden`)
}

// With the sessions page open, a task submitted through the API appears in the
// list without a reload; its timeline, opened while it runs, gains each event as
// the session records it (the model answers only when the test lets it), and
// shows the answer and the completed status at the end, still without a reload.
func TestDashboardUpdatesLiveInChromium(t *testing.T) {
	bin := chromium(t)
	inner, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: "the answer is 42"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	model := &steppedModel{inner: inner, release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{tools.Calculator{}}})
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)

	// The list's safety poll is made an hour long: the new session can only come by
	// the feed (GET /v1/feed/sessions).
	b.navigate(base + "?poll=3600#/sessions")
	b.waitText("#main", "No sessions.")
	b.waitText("#sessions-count", "live")
	b.eval(`window.notReloaded = true`, nil)
	if code, _, body := doCall(t, "POST", strings.TrimSuffix(base, "/ui/")+"/v1/tasks", "", `{"input":"What is 6*7?","session_id":"live-1"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %s", code, body)
	}
	b.waitTrue("live-1 running in the sessions list", `document.querySelector('tr[data-session="live-1"] .badge.running')`)

	b.click(`a[href="#/sessions/live-1"]`)
	b.waitText("#live", "● live")
	b.waitText("#main", "task: What is 6*7?")
	b.waitText("#main", "ask scripted")
	var steps int
	b.eval(`document.querySelectorAll(".tree .step").length`, &steps)

	model.step(t) // the model calls the calculator
	b.waitText("#main", `calculator({"expression":"6*7"})`)
	b.waitText("#main", "calculator → 42")
	var more int
	b.eval(`document.querySelectorAll(".tree .step").length`, &more)
	if more <= steps {
		t.Errorf("the timeline has %d events after the tool call, %d before", more, steps)
	}
	b.screenshot("live.png")

	model.step(t) // the model answers
	b.waitText("#main", "completed: the answer is 42")
	b.waitTrue("the completed status", `document.querySelector("#main .badge.completed")`)
	b.waitTrue("the live label gone", `document.getElementById("live").textContent === ""`)
	var same bool
	b.eval(`window.notReloaded === true`, &same)
	if !same {
		t.Error("the page was reloaded")
	}
}

// A call waiting for approval is approved with a click on the approvals page of
// a node with tokens (the page logged in: the answer is signed in by the cookie
// and carries the CSRF value), and the task completes with the call made.
func TestDashboardApprovesACallInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.HTTP = node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}}
	n := nodetest.Start(t, cfg)
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-click", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "dash-click")
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)

	b.navigate(base + "#/approvals")
	b.typeInto("#token-input", goodToken)
	b.click(`#token button[type="submit"]`)
	b.waitText("#main", "send_email")
	b.typeInto("#main input", "looks fine")
	b.screenshot("approvals.png")
	if sent.Load() != 0 {
		t.Fatal("the email was sent before the click")
	}
	b.click("#main button.approve")
	b.waitText("#main", "No tool call waits for approval.")
	events := waitEnded(t, n, "dash-click")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s, want %s", last.Type, messages.TypeTaskCompleted)
	}
	if sent.Load() != 1 {
		t.Errorf("%d emails sent, want 1", sent.Load())
	}
	b.navigate(base + "#/sessions/dash-click")
	b.waitText("#main", "approved: looks fine")
	b.waitTrue("the completed status", `document.querySelector("#main .badge.completed")`)
}

// A session whose call is held for approval shows a "waiting for approval" badge in
// the sessions list, pushed by the feed (the list's poll is an hour long), and
// again in a new list; the badge links to the session's page, where the call is
// answered; the answer, given through the API, takes the badge away, again by the
// feed.
func TestDashboardListShowsSessionsWaitingForApprovalInChromium(t *testing.T) {
	bin := chromium(t)
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)

	b.navigate(base + "?poll=3600#/sessions")
	b.waitText("#sessions-count", "live")
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "dash-wait", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	badge := `document.querySelector('tr[data-session="dash-wait"] a.badge.waiting[href="#/sessions/dash-wait"]')`
	b.waitTrue("the waiting badge in the list", badge+` && `+badge+`.title.includes("send_email")`)
	b.screenshot("sessions-waiting.png")
	b.click(`tr[data-session="dash-wait"] a.badge.waiting`)
	b.waitText("#main", "Waiting for approval")
	b.waitText("#main", "send_email")

	b.navigate(base + "?poll=3600#/sessions")
	b.waitTrue("the waiting badge in a new list", badge)
	b.waitText("#sessions-count", "live")
	p := waitApproval(t, n, "dash-wait")
	if err := n.Approve(context.Background(), "dash-wait", p.Call, true, "fine", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	b.waitTrue("the session completed, waiting for nothing", `document.querySelector('tr[data-session="dash-wait"] .badge.completed') && !`+badge)
	if sent.Load() != 1 {
		t.Errorf("%d emails sent, want 1", sent.Load())
	}
}
