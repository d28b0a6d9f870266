package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// feedEvent is one event of GET /v1/feed/sessions.
type feedEvent struct {
	name string
	row  node.SessionRow
}

// openFeed opens GET /v1/feed/sessions?query and returns its events as they come;
// the feed is subscribed when it returns (the headers came).
func openFeed(t *testing.T, ctx context.Context, base, query string) <-chan feedEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/feed/sessions?"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("feed %q: %s, %s", query, resp.Status, resp.Header.Get("Content-Type"))
	}
	out := make(chan feedEvent, 64)
	go func() {
		defer close(out)
		scanSSE(resp.Body, func(name, _, data string) bool {
			ev := feedEvent{name: name}
			if name == "session" {
				if err := json.Unmarshal([]byte(data), &ev.row); err != nil {
					t.Errorf("feed data: %v: %s", err, data)
					return false
				}
			}
			out <- ev
			return true
		})
	}()
	return out
}

// nextRow reads the feed's next event, which must be a session's row.
func nextRow(t *testing.T, ctx context.Context, feed <-chan feedEvent) node.SessionRow {
	t.Helper()
	select {
	case ev, ok := <-feed:
		if !ok {
			t.Fatal("the feed ended")
		}
		if ev.name != "session" {
			t.Fatalf("feed event %q, want session", ev.name)
		}
		return ev.row
	case <-ctx.Done():
		t.Fatalf("no feed event: %v", ctx.Err())
	}
	return node.SessionRow{}
}

func TestSessionFeedShowsTasksStartAndEndWithTheListsFilters(t *testing.T) {
	n := nodetest.Start(t, node.Config{Agents: []node.NamedAgent{{Name: "helper", Tools: []string{}}}})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	all := openFeed(t, ctx, srv.URL, "")
	completed := openFeed(t, ctx, srv.URL, "status=completed")
	helper := openFeed(t, ctx, srv.URL, "agent=helper&since=1h")

	nodetest.Run(t, n, "feed-a", "hello")
	for i, want := range []string{messages.StatusRunning, messages.StatusCompleted} {
		row := nextRow(t, ctx, all)
		if row.ID != "feed-a" || row.Status != want || row.Agent != "default" || row.StartedUS == 0 || row.Events < 1 {
			t.Fatalf("event %d: %+v, want feed-a %s by default", i, row, want)
		}
		if want == messages.StatusCompleted && (row.LastSeq < 2 || row.Events != int(row.LastSeq)) {
			t.Fatalf("the completed row counts %d events to seq %d", row.Events, row.LastSeq)
		}
	}
	// The status filter drops the start (the session was not completed before it)
	// and keeps the end.
	if row := nextRow(t, ctx, completed); row.ID != "feed-a" || row.Status != messages.StatusCompleted {
		t.Fatalf("status=completed: %+v", row)
	}

	// A second task of the session leaves "completed": that feed gets its start, so
	// that a client drops the row, then its end.
	nodetest.Run(t, n, "feed-a", "again")
	for _, want := range []string{messages.StatusRunning, messages.StatusCompleted} {
		if row := nextRow(t, ctx, completed); row.ID != "feed-a" || row.Status != want {
			t.Fatalf("status=completed, second task: %+v, want %s", row, want)
		}
	}

	// The agent filter: the default agent's sessions above never reach it.
	if _, err := n.Submit(ctx, node.Task{SessionID: "feed-h", Input: "hi", Agent: "helper"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{messages.StatusRunning, messages.StatusCompleted} {
		if row := nextRow(t, ctx, helper); row.ID != "feed-h" || row.Status != want || row.Agent != "helper" {
			t.Fatalf("agent=helper: %+v, want feed-h %s", row, want)
		}
	}
}

func TestSessionFeedRefusesBadFiltersAndNeedsTheToken(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	if code, _, body := doCall(t, "GET", base+"/v1/feed/sessions", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", code, body)
	}
	for _, q := range []string{"status=done", "since=yesterday"} {
		if code, _, body := doCall(t, "GET", base+"/v1/feed/sessions?"+q, goodToken, ""); code != http.StatusBadRequest || !strings.Contains(body, strings.Split(q, "=")[0]) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	if code, h, _ := doCall(t, "GET", base+"/v1/feed/sessions?status=running&since=24h&agent=default", goodToken, ""); code != http.StatusOK || h.Get("Content-Type") != "text/event-stream" {
		t.Errorf("with the token: %d %s", code, h.Get("Content-Type"))
	}
}

// On a cluster, a node that runs no sessions (tools only) feeds the changes of the
// sessions another node runs: it reads troupe.events while its feed has a
// subscriber.
func TestSessionFeedOnAClusterNodeThatRunsNoSessions(t *testing.T) {
	c := newTestCluster(t, 0)
	c.node("runner", 0)
	api, _ := c.node("api", node.RoleTools)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	feed := openFeed(t, ctx, srv.URL, "")
	sessions := submitTasks(t, api, "feed", 1)
	for _, want := range []string{messages.StatusRunning, messages.StatusCompleted} {
		if row := nextRow(t, ctx, feed); row.ID != sessions[0] || row.Status != want {
			t.Fatalf("the api node's feed: %+v, want %s %s", row, sessions[0], want)
		}
	}
}

// A call waiting for approval is a change of its session (still running, waiting
// names the call's tool), and a cancelled task ends it as failed, waiting for
// nothing.
func TestSessionFeedShowsAWaitForApprovalAndACancel(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	feed := openFeed(t, ctx, srv.URL, "")
	if _, err := n.Submit(ctx, node.Task{Input: "mail bob", SessionID: "feed-mail", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	start := nextRow(t, ctx, feed)
	waiting := nextRow(t, ctx, feed)
	if start.ID != "feed-mail" || start.Status != messages.StatusRunning || start.Agent != "mailer" ||
		waiting.ID != "feed-mail" || waiting.Status != messages.StatusRunning || waiting.LastSeq <= start.LastSeq || waiting.Steps != 1 ||
		start.Waiting != nil || !slices.Equal(waiting.Waiting, []string{"send_email"}) {
		t.Fatalf("start %+v, then %+v: want the session running, then running at a later seq after one step, waiting for send_email", start, waiting)
	}
	if err := n.Cancel(ctx, "feed-mail", "not today"); err != nil {
		t.Fatal(err)
	}
	if row := nextRow(t, ctx, feed); row.ID != "feed-mail" || row.Status != messages.StatusFailed || row.LastSeq <= waiting.LastSeq || row.Waiting != nil {
		t.Fatalf("after the cancel: %+v", row)
	}
	if sent.Load() != 0 {
		t.Error("the email was sent")
	}
}

// The answer to a call held for approval is a change of its session: waiting names
// the call's tool until then (in the feed and in GET /v1/sessions?detail=true), and
// nothing after it.
func TestSessionFeedShowsTheWaitEndWhenTheCallIsAnswered(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	feed := openFeed(t, ctx, srv.URL, "")
	if _, err := n.Submit(ctx, node.Task{Input: "mail bob", SessionID: "feed-ok", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	if row := nextRow(t, ctx, feed); row.Status != messages.StatusRunning || row.Waiting != nil {
		t.Fatalf("the start: %+v", row)
	}
	held := nextRow(t, ctx, feed)
	if held.Status != messages.StatusRunning || !slices.Equal(held.Waiting, []string{"send_email"}) {
		t.Fatalf("the call held: %+v, want running and waiting for send_email", held)
	}
	var rows []node.SessionRow
	if code := getJSON(t, srv.URL+"/v1/sessions?detail=true&sessions_only=true", &rows); code != http.StatusOK || len(rows) != 1 || !slices.Equal(rows[0].Waiting, []string{"send_email"}) {
		t.Fatalf("GET /v1/sessions?detail=true&sessions_only=true while the call waits: %d %+v", code, rows)
	}
	p := waitApproval(t, n, "feed-ok")
	if err := n.Approve(ctx, "feed-ok", p.Call, true, "fine", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	answered := nextRow(t, ctx, feed)
	if answered.Status != messages.StatusRunning || answered.Waiting != nil || answered.LastSeq <= held.LastSeq {
		t.Fatalf("after the answer: %+v, want running and waiting for nothing", answered)
	}
	if row := nextRow(t, ctx, feed); row.Status != messages.StatusCompleted || row.Waiting != nil {
		t.Fatalf("the end: %+v", row)
	}
	rows = nil // decoding into the rows above would keep their waiting
	if code := getJSON(t, srv.URL+"/v1/sessions?detail=true&sessions_only=true", &rows); code != http.StatusOK || len(rows) != 1 || rows[0].Waiting != nil {
		t.Fatalf("GET /v1/sessions?detail=true after the answer: %d %+v", code, rows)
	}
	if sent.Load() != 1 {
		t.Errorf("%d emails sent, want 1", sent.Load())
	}
}

// feedReadsLog records the first seq of each read of a session made under a
// context marked with feedReadCtx (the contexts of a test server's requests).
type feedReadsLog struct {
	eventlog.Log
	mu    sync.Mutex
	reads map[string][]uint64
}

type feedReadCtx struct{}

func (l *feedReadsLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if ctx.Value(feedReadCtx{}) != nil {
		l.mu.Lock()
		l.reads[session] = append(l.reads[session], from)
		l.mu.Unlock()
	}
	return l.Log.Read(ctx, session, from)
}

func (l *feedReadsLog) of(session string) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reads[session])
}

// On a cluster node that runs no sessions, the feed folds a session's rows on as
// an embedded node's does: the rows of a session's successive tasks read from the
// shared log only the events since the last row; the feed saw the session's first
// event, so nothing reads its whole history.
func TestSessionFeedOnAClusterNodeReadsOnlyWhatFollowsASessionsLastRow(t *testing.T) {
	c := newTestCluster(t, 0)
	c.node("runner", 0)
	log := &feedReadsLog{Log: c.log, reads: map[string][]uint64{}}
	api, _ := clusterNode(t, c.k, c.group, log, "api", node.RoleTools, []tools.Tool{c.led.tool("api")}, c.calls.model(t, c.log, "api"))
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), feedReadCtx{}, true)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	feed := openFeed(t, ctx, srv.URL, "")
	session := fmt.Sprintf("feed-fold-%d", time.Now().UnixNano())
	const tasks = 3
	for range tasks {
		if _, err := api.Submit(ctx, node.Task{Input: "pay 7", SessionID: session}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{messages.StatusRunning, messages.StatusCompleted} {
			row := nextRow(t, ctx, feed)
			if row.ID != session || row.Status != want || row.Events != int(row.LastSeq) {
				t.Fatalf("the api node's feed: %+v, want %s %s with every event counted", row, session, want)
			}
		}
	}
	reads := log.of(session)
	whole := 0
	for _, from := range reads {
		if from == 1 {
			whole++
		}
	}
	if whole != 0 || len(reads) > 2*tasks {
		t.Fatalf("the rows of %d changes read the session from seqs %v: %d whole reads, want none", 2*tasks, reads, whole)
	}
}

// The feed refuses an agent that cannot be an agent's name, as GET /v1/sessions
// does, with the same message, rather than a stream that never carries a session.
func TestSessionFeedRefusesAnAgentThatIsNoAgentsName(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	for _, agent := range []string{"Helper", "a%20b", "-x", "%E2%9C%93", strings.Repeat("a", 65)} {
		code, _, body := doCall(t, "GET", base+"/v1/feed/sessions?agent="+agent, goodToken, "")
		listCode, _, listBody := doCall(t, "GET", base+"/v1/sessions?agent="+agent, goodToken, "")
		if code != http.StatusBadRequest || !strings.Contains(body, "agent must be") {
			t.Errorf("feed agent=%s: %d %s", agent, code, body)
		}
		if listCode != http.StatusBadRequest || body != listBody {
			t.Errorf("agent=%s: the feed answers %s, the list %d %s", agent, body, listCode, listBody)
		}
	}
}
