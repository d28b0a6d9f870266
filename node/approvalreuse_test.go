package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// Tasks queued on a session whose model reuses call IDs (call_mail in each task):
// the first task's call waits for approval and is cancelled; the next task's call
// of the same ID waits. An answer by that ID, meant for the cancelled call (a
// stale page, a late client), approved the next call, which nobody had looked
// at: it is 409 naming both keys, and the answer by key approves it, once.
func TestApprovalByAReusedCallIDAfterCancelIsRefused(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	n := nodetest.Start(t, cfg)
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	for range 2 {
		if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "ap-reuse", Agent: "mailer"}); err != nil {
			t.Fatal(err)
		}
	}
	first := waitApproval(t, n, "ap-reuse")
	if err := n.Cancel(context.Background(), "ap-reuse", "not now"); err != nil {
		t.Fatal(err)
	}
	var next node.PendingApproval
	waitFor(t, 30*time.Second, "the next task's call waiting", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if p.SessionID == "ap-reuse" && p.Key != first.Key {
				next = p
				return true
			}
		}
		return false
	})
	if next.Call != first.Call {
		t.Fatalf("the calls' IDs: %s and %s, want the same", first.Call, next.Call)
	}
	base := api.URL + "/v1/sessions/ap-reuse/approvals/"
	code, msg := postJSON(t, base+first.Call, `{"approve":true}`)
	if code != http.StatusConflict || !strings.Contains(msg, first.Key) || !strings.Contains(msg, next.Key) || !strings.Contains(msg, "answer by key") {
		t.Fatalf("an answer by the reused call ID: %d %s", code, msg)
	}
	if sent.Load() != 0 {
		t.Fatal("the answer by the reused call ID sent the email")
	}
	if code, msg := postJSON(t, base+url.PathEscape(next.Key), `{"approve":true}`); code != http.StatusAccepted {
		t.Fatalf("the answer by key: %d %s", code, msg)
	}
	events := waitEnded(t, n, "ap-reuse")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the next task ended with %s %s", last.Type, last.Payload)
	}
	if got := sent.Load(); got != 1 {
		t.Fatalf("the email was sent %d times, want 1", got)
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, events); err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}

// An answer by call ID that the first task's call took, sent again over HTTP
// once the next task's call of the same ID waits, may be a client's retry, or an
// answer meant for the call waiting: it answers neither, and a 202 would tell a
// client that meant the call waiting that it was answered, while it waits (and
// times out). It is 409 saying nothing was done, naming the call that took it
// (key, duplicate: that very answer) and the call waiting (waiting), to be
// answered by key.
func TestHTTPApprovalByACallIDAfterTheSessionMovedOnIsRefused(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	for range 2 {
		if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "ap-retry", Agent: "mailer"}); err != nil {
			t.Fatal(err)
		}
	}
	first := waitApproval(t, n, "ap-retry")
	answer := api.URL + "/v1/sessions/ap-retry/approvals/" + url.PathEscape(first.Call)
	if code, out := post(t, answer, `{"approve":true}`); code != http.StatusAccepted || out["status"] != "approved" {
		t.Fatalf("approve: %d %v", code, out)
	}
	var next node.PendingApproval
	waitFor(t, 30*time.Second, "the next task's call waiting", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if p.SessionID == "ap-retry" && p.Key != first.Key {
				next = p
				return true
			}
		}
		return false
	})
	if next.Call != first.Call {
		t.Fatalf("the calls' IDs: %s and %s, want the same", first.Call, next.Call)
	}
	code, out := postAny(t, answer, `{"approve":true}`)
	if msg, _ := out["error"].(string); code != http.StatusConflict || out["key"] != first.Key || out["waiting"] != next.Key || out["duplicate"] != true ||
		!strings.Contains(msg, "nothing was done") || !strings.Contains(msg, "answer by its key") || out["status"] != nil {
		t.Fatalf("the same answer by call ID: %d %v; want 409, nothing done, taken for %s, %s waiting", code, out, first.Key, next.Key)
	}
	if again := waitApproval(t, n, "ap-retry"); again.Key != next.Key {
		t.Fatalf("the call waiting: %+v, want %+v", again, next)
	}
	if got := sent.Load(); got != 1 {
		t.Fatalf("the email was sent %d times, want 1", got)
	}
	// The other answer by that ID is refused too, the earlier call not having
	// taken it.
	if code, out := postAny(t, answer, `{"approve":false}`); code != http.StatusConflict || out["duplicate"] != false || out["waiting"] != next.Key {
		t.Fatalf("the other answer by the reused call ID: %d %v", code, out)
	}
}

// The same answer sent twice over HTTP (a client's retry of an answer that
// landed) was 202 with status "taken": a client checking status == "approved"
// read its retry as a failure. It gets the first answer's status, and
// duplicate, the key of the call that took it and a note; it changes nothing.
func TestHTTPApprovalSentTwiceKeepsItsStatus(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "ap-twice", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	p := waitApproval(t, n, "ap-twice")
	for _, call := range []string{p.Call, p.Key} {
		answer := api.URL + "/v1/sessions/ap-twice/approvals/" + url.PathEscape(call)
		code, out := postAny(t, answer, `{"approve":true}`)
		if code != http.StatusAccepted || out["status"] != "approved" || out["call"] != call {
			t.Fatalf("approve by %s: %d %v", call, code, out)
		}
		if call == p.Call && out["duplicate"] != nil {
			t.Fatalf("the first answer: %v, not a duplicate", out)
		}
		code, out = postAny(t, answer, `{"approve":true}`)
		if note, _ := out["note"].(string); code != http.StatusAccepted || out["status"] != "approved" || out["duplicate"] != true || out["key"] != p.Key ||
			!strings.Contains(note, p.Key) {
			t.Fatalf("the same answer again by %s: %d %v; want 202 approved, a duplicate taken for %s", call, code, out, p.Key)
		}
	}
	waitEnded(t, n, "ap-twice")
	if got := sent.Load(); got != 1 {
		t.Fatalf("the email was sent %d times, want 1", got)
	}
}

// postAny posts body as JSON to url, and returns the status and the JSON object
// answered.
func postAny(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %d: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}
