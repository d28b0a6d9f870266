package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// timelineRows is how many event rows the open session's timeline holds in the
// page.
func timelineRows(b *browser) int {
	b.t.Helper()
	var n int
	b.eval(`document.querySelectorAll(".tree .step").length`, &n)
	return n
}

// timelineEnd waits until the open session's timeline has read all its events,
// scrolls it to its end, and returns its last row's text once it is event seq.
func timelineEnd(b *browser, seq int) string {
	b.t.Helper()
	b.waitTrue("the timeline read whole", `document.querySelector(".tree[data-complete]")`)
	b.eval(`(() => { const t = document.querySelector(".tree"); t.scrollTop = t.scrollHeight; })()`, nil)
	b.waitTrue(fmt.Sprintf("event %d drawn last", seq),
		fmt.Sprintf(`[...document.querySelectorAll(".tree .step")].pop().querySelector(".seq").textContent === "%d"`, seq))
	var last string
	b.eval(`[...document.querySelectorAll(".tree .step")].pop().innerText`, &last)
	return last
}

// findInTimeline types q in the timeline's search box and presses Enter (which
// goes on from the event selected); it returns the heading of the event shown.
func findInTimeline(b *browser, q string) string {
	b.t.Helper()
	b.eval(`document.getElementById("find").value = ""`, nil)
	b.typeInto("#find", q)
	b.eval(`document.getElementById("find").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}))`, nil)
	var h string
	b.eval(`document.querySelector(".detail h2")?.textContent ?? ""`, &h)
	return h
}

// A session of 100,002 events (25,000 tool-calling steps, each caused by the one
// before): its timeline shows its first rows before the rest is read, and holds
// in the page only the rows in view, however far it is scrolled; its end, an
// event found by the search box deep in it, and an event linked by the address
// are each drawn when asked for. The page drew every event at once, and a session
// this long showed nothing for half a minute.
func TestDashboardDrawsOnlyTheRowsInViewOfALargeSessionInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	deepSession(t, n, "huge-1", 25000)
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	const maxRows = 200 // the window's rows and their margin, far from 100,002

	b.navigate(base + "#/sessions/huge-1")
	b.waitText(".tree", "task: count to a thousand")
	if got := timelineRows(b); got == 0 || got > maxRows {
		t.Errorf("the first screen holds %d rows, want 1 to %d", got, maxRows)
	}
	last := timelineEnd(b, 100002)
	if !strings.Contains(last, "completed: done") {
		t.Errorf("the timeline's last row is %q, want the task's end", last)
	}
	b.waitText("#events-count", "100,002")
	if got := timelineRows(b); got > maxRows {
		t.Errorf("scrolled to its end, the timeline holds %d rows, want at most %d", got, maxRows)
	}

	// The search box finds an event deep in the session, then the next one, and
	// an event by its seq; each is selected, shown, and drawn in view.
	if h := findInTimeline(b, `echo({"n":20000})`); h != "#79999 model.responded" {
		t.Errorf("the search for step 20000's call shows %q, want #79999 model.responded", h)
	}
	if h := findInTimeline(b, `echo({"n":20000})`); h != "#80000 tool.requested" {
		t.Errorf("the search's second match shows %q, want #80000 tool.requested", h)
	}
	b.waitTrue("event 80000 selected in view", `document.querySelector(".tree .step.selected .seq")?.textContent === "80000"`)
	if h := findInTimeline(b, "#12345"); h != "#12345 tool.completed" {
		t.Errorf("the search for #12345 shows %q", h)
	}
	b.waitTrue("event 12345 selected in view", `document.querySelector(".tree .step.selected .seq")?.textContent === "12345"`)
	if got := timelineRows(b); got > maxRows {
		t.Errorf("after the searches, the timeline holds %d rows, want at most %d", got, maxRows)
	}
	var hash string
	b.eval(`location.hash`, &hash)
	if hash != "#/sessions/huge-1/12345" {
		t.Errorf("the address is %q, want the event found's", hash)
	}

	// An address naming an event past the first page shows it once it is read.
	b.navigate(base + "#/sessions/huge-1/90001")
	b.waitTrue("event 90001 selected in view", `document.querySelector(".tree .step.selected .seq")?.textContent === "90001"`)
	var h string
	b.eval(`document.querySelector(".detail h2").textContent`, &h)
	if h != "#90001 tool.completed" {
		t.Errorf("the address of event 90001 shows %q", h)
	}
}

// The timeline lays a session out a page of events at a time (timeline.js,
// extend: at the end of its rows when it can, else all again) as it would all at
// once (layOut): the same rows, in the same order, at the same depths, for
// sessions of random causations (a step's cause, an earlier event's, none, a
// later event's, its own), read in pages of random lengths.
func TestDashboardTimelineLaysOutPageByPageAsWholeInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "#/charts")
	var got struct {
		Sessions, Differ, Extended int
		First                      string
	}
	b.eval(`(async () => {
		const { layOut, extend } = await import("/ui/timeline.js");
		let seed = 7;
		const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
		const shape = (l) => JSON.stringify(l.rows.map((r) => [r.e.id, r.depth, Boolean(r.ctx)]));
		const out = { Sessions: 0, Differ: 0, Extended: 0, First: "" };
		for (let s = 0; s < 2000; s++) {
			const events = [];
			const n = 1 + Math.floor(rand() * 80);
			for (let i = 1; i <= n; i++) {
				const r = rand();
				const cause = i > 1 && r < 0.6 ? "e" + (i - 1) : i > 1 && r < 0.85 ? "e" + (1 + Math.floor(rand() * (i - 1)))
					: r < 0.9 ? "e" + (i + 1 + Math.floor(rand() * 5)) : r < 0.93 ? "e" + i : "";
				events.push({ id: "e" + i, seq: i, causation_id: cause, type: rand() < 0.3 ? "model.requested" : "tool.completed",
					payload: rand() < 0.5 ? { context: { used: 1 } } : {} });
			}
			let l = layOut([]);
			for (let k = 0; k < n;) {
				k = Math.min(n, k + 1 + Math.floor(rand() * 8));
				if (extend(l, events.slice(0, k))) out.Extended++;
				else l = layOut(events.slice(0, k));
			}
			out.Sessions++;
			const whole = layOut(events);
			if (shape(l) !== shape(whole) || l.count !== n) {
				out.Differ++;
				if (!out.First) out.First = JSON.stringify(events.map((e) => e.id + "<" + e.causation_id)) + "\n" + shape(l) + "\n" + shape(whole);
			}
		}
		return out;
	})()`, &got)
	if got.Sessions != 2000 || got.Differ != 0 {
		t.Errorf("%d of %d sessions laid out page by page differ from laid out whole; the first:\n%s", got.Differ, got.Sessions, got.First)
	}
	if got.Extended == 0 {
		t.Error("no page was laid out at the end of the rows")
	}
}
