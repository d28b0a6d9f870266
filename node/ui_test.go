package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

func TestDashboardAssetsAreServedWithTheirTypesAndAStrictPolicy(t *testing.T) {
	_, srv := startNode(t, t.TempDir())
	for path, want := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "text/html; charset=utf-8",
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/chart.js":    "text/javascript; charset=utf-8",
		"/ui/timeline.js": "text/javascript; charset=utf-8",
		"/ui/style.css":   "text/css; charset=utf-8",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
		if got := resp.Header.Get("Content-Type"); got != want {
			t.Errorf("%s: Content-Type %q, want %q", path, got, want)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
		etag := resp.Header.Get("ETag")
		if etag == "" {
			t.Fatalf("%s: no ETag", path)
		}
		// A browser that has the file asks again and gets 304.
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s with If-None-Match: %d, want 304", path, resp.StatusCode)
		}
	}
	// No inline script: the policy would block it.
	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "style=") || strings.Contains(string(page), "onclick") {
		t.Errorf("the page has inline script or style:\n%s", page)
	}
}

func TestDashboardUnknownPathsAre404AndUIRedirects(t *testing.T) {
	_, srv := startNode(t, t.TempDir())
	for _, path := range []string{"/ui/nope.js", "/ui/../go.mod", "/ui/ui/app.js", "/ui/app.js/", "/ui/.hidden"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	req, _ := http.NewRequest("POST", srv.URL+"/ui/", strings.NewReader("x"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", resp.StatusCode)
	}
}

// getJSON decodes the JSON answer of a GET into v and returns its status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

func TestStatsEndpointHasTheFiguresOfReplayStats(t *testing.T) {
	n, srv := startNode(t, t.TempDir())
	nodetest.Run(t, n, "calc", "What is 12 * (7 + 5)?")
	nodetest.Run(t, n, "div", "what is 1/0")
	nodetest.Run(t, n, "echo", "echo hi")
	a, ok := n.Log().(eventlog.Analytics)
	if !ok {
		t.Fatal("the embedded log has no analytics")
	}
	for _, q := range []string{"", "?since=1h", "?since=2020-01-01", "?agent=default", "?agent=other"} {
		var got eventlog.Stats
		if code := getJSON(t, srv.URL+"/v1/stats"+q, &got); code != http.StatusOK {
			t.Fatalf("/v1/stats%s: %d", q, code)
		}
		f := eventlog.StatsFilter{}
		if strings.Contains(q, "agent=") {
			f.Agent = strings.TrimPrefix(q, "?agent=")
		}
		want, err := a.Report(context.Background(), f) // every event is within the hour
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON both, as replay stats --json prints them.
		b, _ := json.Marshal(want)
		var wantJSON eventlog.Stats
		_ = json.Unmarshal(b, &wantJSON)
		if !reflect.DeepEqual(got, wantJSON) {
			t.Errorf("/v1/stats%s:\n got %+v\nwant %+v", q, got, wantJSON)
		}
		if f.Agent != "other" && (len(got.Tools) != 1 || got.Tools[0].Tool != "calculator" || got.Tools[0].Calls != 2 || got.Tools[0].Errors != 1 ||
			len(got.Sessions) != 1 || got.Sessions[0].Sessions != 3 || got.Sessions[0].Completed != 3 || len(got.Models) != 1 || got.Models[0].Calls != 5) {
			t.Errorf("/v1/stats%s: %+v", q, got)
		}
	}
	var recent eventlog.Stats
	if code := getJSON(t, srv.URL+"/v1/stats?since=2999-01-01", &recent); code != http.StatusOK || len(recent.Models)+len(recent.Tools)+len(recent.Sessions) != 0 {
		t.Errorf("since the future: %d %+v", code, recent)
	}
	if code := getJSON(t, srv.URL+"/v1/stats?since=yesterday-ish", new(any)); code != http.StatusBadRequest {
		t.Errorf("a bad since: %d, want 400", code)
	}
}

func TestSessionListFiltersAndDetail(t *testing.T) {
	n, srv := startNode(t, t.TempDir())
	nodetest.Run(t, n, "calc", "What is 12 * (7 + 5)?")
	var rows []node.SessionRow
	if code := getJSON(t, srv.URL+"/v1/sessions?detail=true&since=1h&status=completed", &rows); code != http.StatusOK {
		t.Fatalf("detail: %d", code)
	}
	if len(rows) != 1 || rows[0].ID != "calc" || rows[0].Agent != "default" || rows[0].Steps != 2 ||
		rows[0].Usage.PromptTokens == 0 || rows[0].Usage.CompletionTokens == 0 {
		t.Fatalf("rows: %+v", rows)
	}
	if code := getJSON(t, srv.URL+"/v1/sessions?status=failed", &rows); code != http.StatusOK || len(rows) != 0 {
		t.Errorf("status=failed: %d %+v", code, rows)
	}
	if code := getJSON(t, srv.URL+"/v1/sessions?since=2999-01-01", &rows); code != http.StatusOK || len(rows) != 0 {
		t.Errorf("since the future: %d %+v", code, rows)
	}
	for _, q := range []string{"status=done", "since=soon"} {
		if code := getJSON(t, srv.URL+"/v1/sessions?"+q, new(any)); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
}

// GET /v1/stats?buckets= has the range to now in buckets of time, summed by the
// log, with the figures the dashboard's charts show: the charts read them there
// rather than every event of up to 100 sessions. Its buckets together hold the
// models' tokens and cost and the tool calls of the range.
func TestStatsEndpointHasTheChartsSeries(t *testing.T) {
	n, srv := startNode(t, t.TempDir())
	nodetest.Run(t, n, "calc", "What is 12 * (7 + 5)?")
	nodetest.Run(t, n, "div", "what is 1/0")
	var got eventlog.Stats
	if code := getJSON(t, srv.URL+"/v1/stats?since=1h&buckets=24", &got); code != http.StatusOK {
		t.Fatalf("/v1/stats?since=1h&buckets=24: %d", code)
	}
	if len(got.Series) != 24 {
		t.Fatalf("series of %d buckets, want 24: %+v", len(got.Series), got.Series)
	}
	var tokens, calls int64
	var cost float64
	for i, b := range got.Series {
		tokens, cost, calls = tokens+b.Tokens, cost+b.CostUSD, calls+b.ToolCalls
		if i > 0 && b.StartUS-got.Series[i-1].StartUS != got.Series[1].StartUS-got.Series[0].StartUS {
			t.Errorf("bucket %d starts at %d: the buckets are not of one width", i, b.StartUS)
		}
	}
	var wantTokens, wantCalls int64
	var wantCost float64
	for _, m := range got.Models {
		wantTokens, wantCost = wantTokens+m.PromptTokens+m.CompletionTokens, wantCost+m.CostUSD
	}
	for _, tl := range got.Tools {
		wantCalls += tl.Calls
	}
	if tokens != wantTokens || tokens == 0 || calls != wantCalls || calls != 2 || cost-wantCost > 1e-9 || wantCost-cost > 1e-9 {
		t.Errorf("the buckets hold %d tokens, $%g, %d tool calls; the range %d, $%g, %d", tokens, cost, calls, wantTokens, wantCost, wantCalls)
	}
	for _, q := range []string{"?since=1h&buckets=0", "?since=1h&buckets=1001", "?since=1h&buckets=x", "?buckets=24"} {
		if code := getJSON(t, srv.URL+"/v1/stats"+q, new(any)); code != http.StatusBadRequest {
			t.Errorf("/v1/stats%s: %d, want 400", q, code)
		}
	}
}
