package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// deadline_ms is bounded to 30 days: more (up to the int64 overflow that made the
// task fail at once), zero and negative values are refused, naming the field.
func TestDeadlineMSIsBounded(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	for _, v := range []string{"9223372036854775807", "2592000001", "0", "-1", "null"} {
		code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo x","deadline_ms":`+v+`}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "deadline_ms") {
			t.Errorf("deadline_ms %s: %d %q", v, code, msg)
		}
	}
	noSessions(t, n)
	code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo in time","session_id":"d30","deadline_ms":2592000000}`)
	if code != http.StatusAccepted {
		t.Fatalf("30 days: %d %s", code, msg)
	}
	if r := waitDone(t, base, "d30"); r.Status != messages.StatusCompleted || r.Output != "in time" {
		t.Fatalf("a task with a 30-day deadline: %+v", r)
	}
}

// POST /v1/tasks takes JSON only, so a web page cannot submit a task to a local node
// with a simple (CORS-exempt) cross-site form or text/plain request.
func TestPostTaskRequiresJSONContentType(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	body := `{"input":"echo x"}`
	for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonp", "nonsense;;"} {
		code, msg := postAs(t, base+"/v1/tasks", ct, body)
		if code != http.StatusUnsupportedMediaType || !strings.Contains(msg, "Content-Type") {
			t.Errorf("Content-Type %q: %d %q", ct, code, msg)
		}
	}
	noSessions(t, n)
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8", "application/json; charset=utf8", "application/json;charset=UTF8"} {
		if code, msg := postAs(t, base+"/v1/tasks", ct, body); code != http.StatusAccepted {
			t.Errorf("Content-Type %q: %d %q", ct, code, msg)
		}
	}
}

// Duplicate keys, keys that match a field only case-insensitively and a blank input
// are refused with a reason; none of them writes anything.
func TestTaskBodyRejectsDuplicateAndMiscasedKeysAndBlankInput(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	cases := []struct{ body, reason string }{
		{`{"input":"echo a","input":"echo b"}`, `duplicate key "input"`},
		{`{"input":"echo a","session_id":"s1","session_id":"s2"}`, `duplicate key "session_id"`},
		{`{"INPUT":"echo a"}`, `"INPUT"`},
		{`{"Input":"echo a"}`, `"Input"`},
		{`{"input":"echo a","Session_ID":"s1"}`, `"Session_ID"`},
		{`{"input":"  \n\t "}`, "input"},
		{`{"input":"\u00a0\u2003"}`, "input"},
		{`[{"input":"echo a"}]`, "JSON object"},
	}
	for _, c := range cases {
		code, msg := postAs(t, base+"/v1/tasks", "application/json", c.body)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.reason) {
			t.Errorf("%s: %d %q, want 400 naming %s", c.body, code, msg, c.reason)
		}
	}
	noSessions(t, n)
}

// A body far larger than the bound is refused after reading at most a little more
// than the bound, never all of it.
func TestHugeTaskBodyIsRefusedUnread(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	const size = 1 << 30
	for _, chunked := range []bool{false, true} {
		body := &hugeBody{size: size}
		req, err := http.NewRequest(http.MethodPost, base+"/v1/tasks", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = size
		if chunked {
			req.ContentLength = -1
		}
		client := &http.Client{Timeout: 30 * time.Second}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("chunked %v: %d", chunked, resp.StatusCode)
			}
		}
		// The server may close the connection while the client still writes; then the
		// client sees an error instead of the 413. Either way it stopped reading early.
		if sent := body.read.Load(); sent > 64<<20 {
			t.Errorf("chunked %v: the client sent %d bytes before the server refused the body", chunked, sent)
		}
	}
	noSessions(t, n)
}

// hugeBody is a JSON task whose input never ends, up to size bytes.
type hugeBody struct {
	size int64
	read atomic.Int64
}

func (b *hugeBody) Read(p []byte) (int, error) {
	off := b.read.Load()
	if off >= b.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.size-off)]
	for i := range p {
		p[i] = 'x'
	}
	if off == 0 {
		copy(p, `{"input":"`)
	}
	b.read.Add(int64(len(p)))
	return len(p), nil
}

// reply_topic must be a legal Kafka topic name outside the node's own topics (with or
// without a topic prefix): a result sent to troupe.tasks would loop back into ingress.
// Kafka treats '.' and '_' in topic names alike, so troupe_results is troupe.results
// to it (TestReplyTopicThatCollidesWithTheResultsTopic).
func TestReplyTopicIsRestricted(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	bad := []string{
		messages.TopicTasks, messages.TopicEvents, messages.TopicResults, messages.TopicToolRequests,
		messages.TopicModelRequests, messages.TopicReplies, messages.TopicEffectCancels, node.TopicPoison,
		"prod." + messages.TopicTasks, "prod." + messages.TopicEffectCancels, "prod-" + messages.TopicResults, "troupe.future",
		"troupe_results", "troupe_tasks", "prod_troupe_events", "troupe_future",
		"has space", "a/b", "ünïcode", ".", "..", strings.Repeat("a", 250), "tab\t",
	}
	for _, topic := range bad {
		b, _ := json.Marshal(map[string]string{"input": "echo x", "reply_topic": topic})
		code, msg := postAs(t, base+"/v1/tasks", "application/json", string(b))
		if code != http.StatusBadRequest || !strings.Contains(msg, "reply_topic") {
			t.Errorf("reply_topic %q: %d %q", topic, code, msg)
		}
	}
	noSessions(t, n)
	for _, topic := range []string{"my-app.results_v1", strings.Repeat("a", 249), "troupe-results", "TROUPE-x"} {
		b, _ := json.Marshal(map[string]string{"input": "echo x", "reply_topic": topic})
		if code, msg := postAs(t, base+"/v1/tasks", "application/json", string(b)); code != http.StatusAccepted {
			t.Errorf("reply_topic %q: %d %q", topic, code, msg)
		}
	}
}

// A session ID the redactor would change is refused: its effect keys carry the ID, and
// a redacted key never matches its answer (the session looped, writing events without
// end). One with "sk-" inside a word is no key, and runs.
func TestSessionIDsShapedLikeKeys(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	for _, id := range []string{"sk-abcdefghijklmnopqrstuvwxyz", "a.sk-proj-AbCdEf0123456789_AbCdEf"} {
		code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo x","session_id":"`+id+`"}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "credential") {
			t.Errorf("session_id %s: %d %q", id, code, msg)
		}
	}
	noSessions(t, n)
	code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"What is 2*3?","session_id":"desk-support-ticket-1234567"}`)
	if code != http.StatusAccepted {
		t.Fatalf("desk-support-ticket-1234567: %d %s", code, msg)
	}
	if r := waitDone(t, base, "desk-support-ticket-1234567"); r.Status != messages.StatusCompleted || r.Output != "6" {
		t.Fatalf("desk-support-ticket-1234567: %+v", r)
	}
}

// A task submitted while the node is still starting (node serve listens for HTTP
// beside Run) waits for the router: the in-process bus dropped a task published before
// the tasks handler subscribed, and Submit then waited out its timeout (HTTP cut the
// request first: the client saw EOF).
func TestSubmitWhileStartingWaitsForTheNode(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), SubmitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := n.Submit(context.Background(), node.Task{Input: "What is 2*3?", SessionID: "early"})
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("Submit returned before the node ran: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Submit did not return within 10 s of the start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 1 && infos[0].Status == messages.StatusCompleted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the early task did not complete: %+v", infos)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
