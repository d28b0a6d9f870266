package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node/nodetest"
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
