package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// hostileText is what a task, a model or a tool may say to the dashboard: markup,
// a script end, a javascript: URL, quote breaks, CSS, a bidi override, zero-width
// characters and a terminal escape.
const hostileText = `<img src=x onerror="window.__owned=1"></script><script>window.__owned=2</script>` +
	`<a href="javascript:window.__owned=3">x</a> "' ;}</style><style>*{display:none!important}</style>` +
	"\u202egnp.exe\u202c \u200bzero\u200dwidth\ufeff \x1b[31mred\x1b[0m"

// Every answer of the API the dashboard reads says what it is and forbids the
// browser to sniff another type from its body: a hostile value (a task input
// starting with "<html>", say) opened directly in the browser is never taken for a
// page.
func TestDashboardAPIAnswersAreTypedAndNotSniffed(t *testing.T) {
	n, srv := startNode(t, t.TempDir())
	nodetest.Run(t, n, "hostile-1", "<html><body><script>alert(1)</script> echo "+hostileText)
	for path, want := range map[string]string{
		"/v1/sessions":                  "application/json",
		"/v1/sessions?detail=true":      "application/json",
		"/v1/sessions/hostile-1":        "application/json",
		"/v1/sessions/hostile-1/events": "application/json",
		"/v1/sessions/nope/events":      "application/json",
		"/v1/approvals":                 "application/json",
		"/v1/stats?since=24h":           "application/json",
		"/v1/no/such/route":             "application/json",
		"/v1/sessions/hostile-1/stream": "text/event-stream",
		"/v1/feed/sessions":             "text/event-stream",
		"/v1/sessions/%3Cimg%3E/events": "application/json",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("GET %s: %v", path, err)
		}
		if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, want) {
			t.Errorf("GET %s: %d, Content-Type %q, want %q", path, resp.StatusCode, got, want)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: %d, X-Content-Type-Options %q, want nosniff", path, resp.StatusCode, got)
		}
		resp.Body.Close()
		cancel()
	}
}

// hostileModel answers as its script does, except a task that asks it to fail:
// then its error (which the session's failure reports) is hostile text.
type hostileModel struct{ inner llm.Model }

func (m hostileModel) Name() string { return m.inner.Name() }

func (m hostileModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	for _, msg := range r.Messages {
		if strings.Contains(msg.Content, "please fail") {
			return llm.Response{}, errors.New("model refused: " + hostileText)
		}
	}
	return m.inner.Generate(ctx, r)
}

// leakTool answers every call with its hostile result.
type leakTool struct{ result string }

func (leakTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "leak", Description: "says something hostile", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (l leakTool) Call(context.Context, tools.Call) (string, error) { return l.result, nil }

// A walk of the dashboard over sessions whose every shown field is hostile: the
// task's input, the model's calls (arguments and an unknown tool's name) and
// answer, a tool's result, errors, the approval's reason; a megabyte of each where
// the node takes it. Nothing of it runs (no handler fires, nothing is fetched from
// the address it names, the policy refuses nothing because nothing was parsed as
// markup), no link becomes javascript:, the pages stay usable (the list renders,
// the Approve button answers, nothing overflows the window) and none hangs.
func TestDashboardShowsHostileSessionsAsTextInChromium(t *testing.T) {
	bin := chromium(t)
	var hits atomic.Int64
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		t.Logf("the recorder was asked for %s", r.URL)
	}))
	t.Cleanup(rec.Close)
	// The hostile text names the recorder: markup parsed as HTML would fetch it.
	evil := strings.ReplaceAll(hostileText, "src=x", "src="+rec.URL+"/img") +
		`<img src=x onerror="fetch('` + rec.URL + `/fetch')"><link rel=stylesheet href="` + rec.URL + `/css">` +
		`<iframe src="javascript:parent.__owned=4"></iframe>`
	big := func(n int) string { return evil + " " + strings.Repeat("<b>A", n/4) }
	args, _ := json.Marshal(map[string]string{"to": "\u202emoc.elpmaxe@eve", "body": big(4 << 10)})
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{Content: evil, ToolCalls: []messages.ToolCall{
			// A model's call ID is any string: ".." in the answer's URL would be a
			// dot segment.
			{ID: "..", Name: "send_email", Arguments: string(args)},
			{ID: "call_leak", Name: "leak", Arguments: `{"q":` + strconv.Quote(evil) + `}`},
			{ID: "call_calc", Name: "calculator", Arguments: `{"expression":` + strconv.Quote(evil) + `}`},
			{ID: "call_evil", Name: `<img src=x onerror="window.__owned=5">`, Arguments: evil},
		}},
		{Content: big(1 << 20)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	n := nodetest.Start(t, node.Config{Model: hostileModel{model},
		Tools:  []tools.Tool{tools.Calculator{}, emailTool{&sent}, leakTool{big(32 << 10)}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email", "calculator", "leak"}, Approvals: []string{"send_email"}}}})
	// The input stays within the model's window: a longer one is condensed by a call of
	// its own, which the script does not expect.
	input := big(64 << 10)
	if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: "hx-ap", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(context.Background(), node.Task{Input: "please fail " + evil, SessionID: "hx-fail", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "hx-ap")
	waitEnded(t, n, "hx-fail")
	base := serveUI(t, n.Handler())

	b := newBrowser(t, bin)
	// clean checks what the page must never show, whatever it draws.
	clean := func(page string) {
		t.Helper()
		var got struct {
			Owned    any
			Markup   int
			JSLinks  []string
			Overflow int
			Hidden   []string
		}
		b.eval(`({Owned: window.__owned ?? null,
			Markup: document.querySelectorAll("main img, main script, main style, main link, main iframe, main meta, main b, main object, main embed").length,
			JSLinks: [...document.querySelectorAll("a[href], [src], [action], [formaction]")].map((e) => e.getAttribute("href") || e.getAttribute("src") || e.getAttribute("action") || e.getAttribute("formaction")).filter((h) => /^\s*javascript:/i.test(h)),
			Overflow: document.documentElement.scrollWidth - window.innerWidth,
			Hidden: (() => {
				const found = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
				while (w.nextNode()) {
					const m = w.currentNode.data.match(/.{0,20}[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff].{0,20}/);
					if (m) found.push(m[0]);
				}
				return found;
			})()})`, &got)
		if got.Owned != nil || got.Markup != 0 || len(got.JSLinks) != 0 {
			t.Errorf("%s: hostile text became markup: window.__owned %v, %d elements, javascript: links %q", page, got.Owned, got.Markup, got.JSLinks)
		}
		// A bidi override or an invisible character shows as what it is: the text
		// reads as the tool gets it.
		if len(got.Hidden) != 0 {
			t.Errorf("%s: the page shows text with bidi or invisible characters as they are: %q", page, got.Hidden)
		}
		if got.Overflow > 0 {
			t.Errorf("%s: the page is %d px wider than the window", page, got.Overflow)
		}
		if h := hits.Load(); h != 0 {
			t.Errorf("%s: the page fetched the hostile text's address %d times", page, h)
		}
	}

	b.navigate(base + "#/sessions")
	b.waitTrue("both sessions listed", `document.querySelector('tr[data-session="hx-ap"] a.badge.waiting') && document.querySelector('tr[data-session="hx-fail"] .badge.failed')`)
	clean("the sessions list")

	b.navigate(base + "#/sessions/hx-fail")
	b.waitText("main", "model refused: <img src=")
	clean("the failed session")

	b.navigate(base + "#/approvals")
	b.waitTrue("the hostile call listed", `document.querySelector("main td.args pre")?.textContent.includes('"to":"[U+202E]moc.elpmaxe@eve"')`)
	clean("the approvals page")
	b.typeInto("main input", evil)
	b.click("main button.approve")
	b.waitText("main", "No tool call waits for approval.")
	waitEnded(t, n, "hx-ap")
	if sent.Load() != 1 {
		t.Fatalf("the approved email was sent %d times", sent.Load())
	}

	b.navigate(base + "#/sessions/hx-ap")
	b.waitTrue("the answer shown", `document.getElementById("answer")?.textContent.length > 1000000`)
	b.waitText(".tree", "approved: <img src=")
	b.waitText(".tree", "leak → <img src=")
	b.waitText(".tree", "task: <img src=")
	clean("the hostile session")
	// Each event's payload, a megabyte among them, is shown as text on a click.
	for _, typ := range []string{"task.submitted", "model.responded", "tool.requested", "tool.completed", "approval.resolved", "task.completed"} {
		q, _ := json.Marshal(typ)
		b.eval(fmt.Sprintf(`[...document.querySelectorAll(".step")].find((s) => s.querySelector(".type").textContent === %s).click()`, q), nil)
		b.waitText(".detail h2", typ)
		clean("the payload of " + typ)
	}
	// A link with a malformed escape in the session's place is no session: the page
	// says so, and its links still work.
	b.navigate(base + "#/sessions/%E0%A4%A")
	b.waitText("main", "No such page")
	b.click(`header nav a[data-route="approvals"]`)
	b.waitText("main", "No tool call waits for approval.")
	b.navigate(base + "#/charts")
	b.waitTrue("the charts drawn", `document.querySelectorAll(".chart svg").length === 5`)
	clean("the charts")
}

// TestDashboardShowsLiveTextAsItIsInChromium: the text of a model answer shown as it
// streams (model.delta) marks a bidi override or an invisible character as
// [U+XXXX], as the recorded answer is shown: it was shown raw, so that a streamed
// "\u202emoc.elpmaxe@eve" read as "eve@example.com" until the answer was whole.
func TestDashboardShowsLiveTextAsItIsInChromium(t *testing.T) {
	bin := chromium(t)
	inner, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{Content: "\u202emoc.elpmaxe@eve \u200bhidden and the rest of a long answer"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	streaming := inner.WithStreaming(8)
	model := textGatedModel{Model: streaming, s: streaming, after: 5, reached: make(chan struct{}), gate: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: model, StreamUnwatched: true})
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	if _, err := n.Submit(context.Background(), node.Task{Input: "write", SessionID: "hx-live"}); err != nil {
		t.Fatal(err)
	}
	model.waitReached(t)
	b.navigate(base + "#/sessions/hx-live")
	b.waitText("#main", "hidden")
	var live string
	b.eval(`document.querySelector(".output.delta").textContent`, &live)
	if strings.ContainsAny(live, "\u202e\u200b") || !strings.Contains(live, "[U+202E]moc.elpmaxe@eve [U+200B]hidden") {
		t.Errorf("the live text reads %q; want each invisible character shown as [U+XXXX]", live)
	}
	close(model.gate)
	waitEnded(t, n, "hx-live")
}
