//go:build uibench

package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestDashboardLargeSessionTimings measures, in headless Chromium, how long a
// session's timeline of 1k, 10k and 100k events takes to show its first rows (painted: the task after the frame that drew them) and
// to let the page's main thread go (the end of its last task longer than 50 ms),
// from the navigation's start. A measurement, not a test: it asserts no time, and
// runs only with -tags uibench:
//
//	go test ./node -tags uibench -run DashboardLargeSessionTimings -count=1 -v -timeout 20m
func TestDashboardLargeSessionTimings(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	base := serveUI(t, n.Handler())
	for _, events := range []int{1000, 10000, 100000} {
		id := fmt.Sprintf("large-%d", events)
		deepSession(t, n, id, (events-2)/4)
		b := newBrowser(t, bin)
		b.call(b.session, "Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `
			window.__t = {first: 0, longest: 0, lastEnd: 0, tasks: 0, done: 0};
			new MutationObserver((_, o) => { if (document.querySelector(".tree[data-complete]")) { window.__t.done = performance.now(); o.disconnect(); } })
				.observe(document, {subtree: true, attributes: true, attributeFilter: ["data-complete"]});
			new PerformanceObserver((l) => { for (const e of l.getEntries()) {
				window.__t.tasks++; window.__t.longest = Math.max(window.__t.longest, e.duration);
				window.__t.lastEnd = Math.max(window.__t.lastEnd, e.startTime + e.duration); } }).observe({type: "longtask", buffered: true});
			new MutationObserver((_, o) => { if (document.querySelector(".tree .step")) { o.disconnect(); requestAnimationFrame(() => setTimeout(() => { window.__t.first = performance.now(); }));  } })
				.observe(document, {childList: true, subtree: true});`}, nil)
		b.navigate(base + "#/sessions/" + id)
		last := 4*((events-2)/4) + 2
		cond := fmt.Sprintf(`document.querySelector(".tree[data-complete]") || [...document.querySelectorAll(".tree .step .seq")].some((s) => s.textContent === "%d")`, last)
		for deadline := time.Now().Add(5 * time.Minute); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			raw, err := b.callCtx(ctx, b.session, "Runtime.evaluate", map[string]any{"expression": "Boolean(" + cond + ")", "returnByValue": true})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var res struct{ Result struct{ Value bool } }
			if json.Unmarshal(raw, &res) == nil && res.Result.Value {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the timeline not drawn in 5 minutes", id)
			}
			time.Sleep(200 * time.Millisecond)
		}
		b.eval(`new Promise((r) => setTimeout(r, 1000))`, nil) // the tasks after
		var got struct {
			First, Longest, LastEnd, Done float64
			Tasks                         int
			API                           []string
		}
		b.eval(`({...window.__t, API: performance.getEntriesByType("resource").filter((r) => r.name.includes("/v1/")).slice(0, 3).map((r) => r.name.replace(/^.*\/v1\//, "") + " " + Math.round(r.startTime) + "+" + Math.round(r.duration) + "ms")})`, &got)
		t.Logf("%6d events: first rows at %6.0f ms; all read at %6.0f ms; main thread free at %6.0f ms; longest task %6.0f ms (%d tasks > 50 ms); first calls %q",
			events, got.First, got.Done, got.LastEnd, got.Longest, got.Tasks, got.API)
	}
}
