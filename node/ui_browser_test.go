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
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
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

	dom = runChromium(t, bin, base+"#/sessions", "--dump-dom")
	if !strings.Contains(dom, `href="#/sessions/dash-1">dash-1</a>`) || !strings.Contains(dom, "default") {
		t.Errorf("the sessions list has no dash-1:\n%s", dom)
	}
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
	if !strings.Contains(dom, `<form id="token">`) || !strings.Contains(dom, "asks for a bearer token: paste it above") {
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
