package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// mailer is a node configuration whose agent "mailer" must have send_email approved;
// the model calls send_email and the calculator in one reply, then answers. sent
// counts the emails sent.
func mailer(t *testing.T, sent *atomic.Int64) node.Config {
	t.Helper()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{
			{ID: "call_mail", Name: "send_email", Arguments: `{"to":"bob@example.com"}`},
			{ID: "call_calc", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		}},
		{Content: "handled"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return node.Config{Model: model, Tools: []tools.Tool{tools.Calculator{}, emailTool{sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email", "calculator"}, Approvals: []string{"send_email"}}}}
}

// emailTool counts the emails it sends.
type emailTool struct{ sent *atomic.Int64 }

func (emailTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "send_email", Description: "sends an email", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (e emailTool) Call(context.Context, tools.Call) (string, error) {
	e.sent.Add(1)
	return "sent", nil
}

// waitApproval waits until the session's call waits for approval and returns it as
// GET /v1/approvals lists it.
func waitApproval(t *testing.T, n *node.Node, session string) node.PendingApproval {
	t.Helper()
	var got node.PendingApproval
	waitFor(t, 30*time.Second, "session "+session+" waiting for an approval", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if p.SessionID == session {
				got = p
				return true
			}
		}
		return false
	})
	return got
}

// waitEnded waits until the session's task ended and returns its events.
func waitEnded(t *testing.T, n *node.Node, session string) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	waitFor(t, 30*time.Second, "session "+session+" done", func() bool {
		var err error
		events, err = n.Log().Read(context.Background(), session, 1)
		return err == nil && len(events) > 0 &&
			(events[len(events)-1].Type == messages.TypeTaskCompleted || events[len(events)-1].Type == messages.TypeTaskFailed)
	})
	return events
}

// postJSON posts body and returns the status and the body's "error".
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	code, out := post(t, url, body)
	return code, out["error"]
}

// The whole HTTP round: the call waits, listed by GET /v1/approvals and shown among
// the session's events, while the reply's other call runs; POST approves it, the
// tool runs once, the task completes. Answers that cannot be recorded get 400, 404
// or 409 and change nothing; the same answer again is harmless.
func TestHTTPApprovalApprovesAndRunsTheToolOnce(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	if code, out := post(t, api.URL+"/v1/tasks", `{"input":"mail bob","session_id":"ap-http","agent":"mailer"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %v", code, out)
	}
	p := waitApproval(t, n, "ap-http")
	if p.Call != "call_mail" || p.Tool != "send_email" || p.Arguments != `{"to":"bob@example.com"}` || p.ExpiresAt != nil || p.RequestedAt.IsZero() {
		t.Fatalf("pending approval: %+v", p)
	}
	resp, err := http.Get(api.URL + "/v1/approvals")
	if err != nil {
		t.Fatal(err)
	}
	var listed []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&listed)
	resp.Body.Close()
	if len(listed) != 1 || listed[0]["call"] != "call_mail" || listed[0]["session_id"] != "ap-http" || listed[0]["requested_at"] == nil {
		t.Fatalf("GET /v1/approvals: %v", listed)
	}
	resp, err = http.Get(api.URL + "/v1/sessions/ap-http")
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		Status    string
		Approvals []node.PendingApproval
	}
	_ = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if view.Status != messages.StatusRunning || len(view.Approvals) != 1 || view.Approvals[0].Key != p.Key {
		t.Fatalf("GET /v1/sessions/{id} of a paused session: %+v", view)
	}
	if sent.Load() != 0 {
		t.Fatal("the email was sent before it was approved")
	}

	url := api.URL + "/v1/sessions/ap-http/approvals/"
	for _, c := range []struct {
		name, url, body string
		code            int
		want            string
	}{
		{"bad JSON", url + "call_mail", `{"approve": tru`, http.StatusBadRequest, "malformed JSON"},
		{"no approve", url + "call_mail", `{"reason":"ok"}`, http.StatusBadRequest, `no "approve"`},
		{"unknown field", url + "call_mail", `{"approve":true,"why":"ok"}`, http.StatusBadRequest, "unknown field"},
		{"unknown session", api.URL + "/v1/sessions/nobody/approvals/call_mail", `{"approve":true}`, http.StatusNotFound, "no session"},
		{"a call that needs none", url + "call_calc", `{"approve":true}`, http.StatusConflict, "(call ID call_mail)"},
	} {
		if code, msg := postJSON(t, c.url, c.body); code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want %d and %q", c.name, code, msg, c.code, c.want)
		}
	}
	if code, msg := postJSON(t, url+"call_mail", `{"approve":true,"reason":"bob expects it"}`); code != http.StatusAccepted {
		t.Fatalf("approve: %d %s", code, msg)
	}
	events := waitEnded(t, n, "ap-http")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task did not complete: %s %s", last.Type, last.Payload)
	}
	if code, msg := postJSON(t, url+"call_mail", `{"approve":true}`); code != http.StatusAccepted {
		t.Errorf("the same answer again: %d %s", code, msg)
	}
	if code, msg := postJSON(t, url+"call_mail", `{"approve":false}`); code != http.StatusConflict || !strings.Contains(msg, "approved (by http) already") {
		t.Errorf("the other answer after the first: %d %s", code, msg)
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("the email was sent %d times, want 1", n)
	}
	var resolved int
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			resolved++
			if e.Actor != "approval/http" {
				t.Errorf("the answer's actor: %s", e.Actor)
			}
		}
	}
	if resolved != 1 {
		t.Fatalf("%d approval.resolved events, want 1", resolved)
	}
	if list, _ := n.PendingApprovals(context.Background()); len(list) != 0 {
		t.Fatalf("still pending after the answer: %+v", list)
	}
	// The stream shows the approval's events among the others.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL+"/v1/sessions/ap-http/stream", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), "event: task.completed") {
		k, err := resp.Body.Read(buf)
		seen.Write(buf[:k])
		if err != nil {
			break
		}
	}
	for _, want := range []string{"event: approval.requested", "event: approval.resolved"} {
		if !strings.Contains(seen.String(), want) {
			t.Errorf("the stream lacks %q:\n%s", want, seen.String())
		}
	}
}

// stopAtApproval starts a node of cfg, submits task and stops the node once a call
// of the task waits for approval (and each of then returned), and returns that call.
func stopAtApproval(t *testing.T, cfg node.Config, task node.Task, then ...func(*node.Node)) node.PendingApproval {
	t.Helper()
	first, stop := nodetest.StartWithStop(t, cfg)
	defer stop()
	if _, err := first.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	p := waitApproval(t, first, task.SessionID)
	for _, f := range then {
		f(first)
	}
	return p
}

// A call waiting for approval stays paused across a restart of the node: the next
// node on the same data directory resumes the session still waiting, the answer
// comes to it, and the tool runs once. Replay verification of the session says
// deterministic.
func TestApprovalAfterNodeRestart(t *testing.T) {
	dir := t.TempDir()
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.DataDir = dir
	p := stopAtApproval(t, cfg, node.Task{Input: "mail bob", SessionID: "ap-restart", Agent: "mailer"}, func(first *node.Node) {
		// The reply's other call is answered before the node stops.
		waitFor(t, 30*time.Second, "the calculator's result", func() bool {
			events, _ := first.Log().Read(context.Background(), "ap-restart", 1)
			for _, e := range events {
				if e.Type == messages.TypeToolCallCompleted {
					return true
				}
			}
			return false
		})
	})

	second := nodetest.Start(t, cfg)
	if again := waitApproval(t, second, "ap-restart"); again.Key != p.Key {
		t.Fatalf("after the restart the session waits for %+v, want %+v", again, p)
	}
	if sent.Load() != 0 {
		t.Fatal("the restart sent the email before it was approved")
	}
	if err := second.Approve(context.Background(), "ap-restart", p.Call, true, "", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	events := waitEnded(t, second, "ap-restart")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task did not complete: %s %s", last.Type, last.Payload)
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("the email was sent %d times, want 1", n)
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, events); err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}

// Without an answer, an approval expires after the agent's timeout: the call is
// rejected "by timeout" and the model reads that as its result. A late answer is
// refused.
func TestApprovalTimeoutRejectsTheCall(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.ApprovalTimeout = 300 * time.Millisecond
	n := nodetest.Start(t, cfg)
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "ap-timeout", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	if p := waitApproval(t, n, "ap-timeout"); p.ExpiresAt == nil || p.ExpiresAt.Sub(p.RequestedAt) != 300*time.Millisecond {
		t.Fatalf("pending approval: %+v, want it to expire 300ms after it was requested", p)
	}
	events := waitEnded(t, n, "ap-timeout")
	var rejected string
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			p, _ := e.Decode()
			if c := p.(*messages.ToolCallCompleted); c.Tool == "send_email" {
				rejected = c.Error
			}
		}
	}
	if !strings.Contains(rejected, "expired") || sent.Load() != 0 {
		t.Fatalf("send_email's result: %q (sent %d)", rejected, sent.Load())
	}
	if err := n.Approve(context.Background(), "ap-timeout", "call_mail", true, "", messages.ApprovedByAPI); !errors.Is(err, actors.ErrApprovalNotPending) {
		t.Fatalf("a late answer: %v", err)
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, events); err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}

// Any Kafka client answers an approval with a task.approval message on troupe.tasks.
func TestKafkaApprovalMessageApproves(t *testing.T) {
	k := newKafkaEnv(t)
	var sent atomic.Int64
	n := k.nodeWith(t, mailer(t, &sent))
	session := "ap-kafka-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session),
		Value: []byte(`{"input":"mail bob","agent":"mailer","session_id":"` + session + `"}`)}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, session)
	approval := kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + session + `","call":"call_mail","approve":true,"reason":"ok from kafka"}`),
		Headers: []kgo.Header{{Key: messages.MetaType, Value: []byte(messages.TypeApprovalAnswer)}}}
	// A malformed answer first (no "approve"): it goes to the poison topic, its
	// client is told on troupe.results (an approval.refused naming its session and
	// call), and it does not block the next.
	bad := kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + session + `","call":"call_mail"}`), Headers: approval.Headers}
	if err := w.WriteMessages(ctx, bad, approval); err != nil {
		t.Fatal(err)
	}
	var res messages.TaskResult
	var refused []messages.ApprovalRefused
	waitFor(t, 60*time.Second, "the task's result on "+messages.TopicResults, func() bool {
		refused = nil
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			if header(m, messages.MetaType) == messages.TypeApprovalRefused {
				var r messages.ApprovalRefused
				if err := json.Unmarshal(m.Value, &r); err != nil {
					t.Fatalf("%s: %v", m.Value, err)
				}
				refused = append(refused, r)
			} else if err := json.Unmarshal(m.Value, &res); err != nil {
				t.Fatalf("%s: %v", m.Value, err)
			}
		}
		return res.Status != ""
	})
	if res.Status != messages.StatusCompleted || res.Output != "handled" {
		t.Fatalf("result: %+v", res)
	}
	if len(refused) != 1 || refused[0].SessionID != session || refused[0].Call != "call_mail" || !strings.Contains(refused[0].Error, `without "approve"`) {
		t.Fatalf("the malformed answer's replies: %+v; want one approval.refused naming its session and call", refused)
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("the email was sent %d times, want 1", n)
	}
	poisoned := findRecord(t, k, node.TopicPoison, session)
	if !strings.Contains(string(poisoned.Value), `"call":"call_mail"`) {
		t.Fatalf("poisoned: %s", poisoned.Value)
	}
	events, err := n.Log().Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			p, _ := e.Decode()
			if r := p.(*messages.ApprovalResolved); !r.Approve || r.By != messages.ApprovedByKafka || r.Reason != "ok from kafka" {
				t.Fatalf("the answer recorded: %+v", r)
			}
			return
		}
	}
	t.Fatalf("no approval.resolved: %d events", len(events))
}

// clusterMailer starts a sharded node of the mailer configuration on Kafka, in group,
// writing to the shared log.
func clusterMailer(t *testing.T, k kafkaEnv, group string, log eventlog.Log, name string, sent *atomic.Int64) *node.Node {
	t.Helper()
	clients, err := kafka.DialNode(k.brokers, group, k.layout(6), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mailer(t, sent)
	cfg.Log, cfg.NodeID = log, name
	cfg.Bus = &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
		Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		_ = clients.Close()
		t.Fatal(err)
	}
	clients.SetOwner(n)
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); _ = clients.Close() })
	return n
}

// In a sharded cluster an answer given to any node reaches the session's owner over
// troupe.tasks, and GET /v1/approvals on either node lists the calls waiting (the
// nodes share the log).
func TestClusterApproval(t *testing.T) {
	k, group, log := newKafkaEnv(t), uniqueGroup(t), sharedLog(t)
	var sent atomic.Int64
	a := clusterMailer(t, k, group, log, "a", &sent)
	b := clusterMailer(t, k, group, log, "b", &sent)
	waitFor(t, 60*time.Second, "both nodes own partitions", func() bool { return a.PartitionsOwned() > 0 && b.PartitionsOwned() > 0 })
	var sessions []string
	for i := range 4 {
		id := fmt.Sprintf("ap-cluster-%d-%d", time.Now().UnixNano(), i)
		if _, err := a.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: id, Agent: "mailer"}); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, id)
	}
	for i, id := range sessions {
		waitApproval(t, []*node.Node{a, b}[i%2], id)
	}
	for i, id := range sessions {
		if err := []*node.Node{b, a}[i%2].Approve(context.Background(), id, "call_mail", i%2 == 0, "from the cluster", messages.ApprovedByAPI); err != nil {
			t.Fatalf("approve %s: %v", id, err)
		}
	}
	for i, id := range sessions {
		events := waitEnded(t, a, id)
		var result *messages.ToolCallCompleted
		for _, e := range events {
			if p, _ := e.Decode(); e.Type == messages.TypeToolCallCompleted && p.(*messages.ToolCallCompleted).Tool == "send_email" {
				result = p.(*messages.ToolCallCompleted)
			}
		}
		approved := i%2 == 0
		if result == nil || approved != (result.Result == "sent") || !approved && result.Error != "rejected: from the cluster" {
			t.Errorf("session %s (approved %v): send_email's result %+v", id, approved, result)
		}
	}
	if n := sent.Load(); n != 2 {
		t.Fatalf("%d emails sent, want 2 (one per approved session)", n)
	}
}

// Every answer passes the ingress's rules: a session ID, a call, a bounded reason
// with its secrets redacted, a known source.
func TestAdmitApproval(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	in := n.Ingress()
	const secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
	a, err := in.AdmitApproval("s-1", "call_1", true, "key "+secret, messages.ApprovedByHTTP)
	if err != nil || strings.Contains(a.Reason, secret) || !a.Approve || a.Call != "call_1" {
		t.Fatalf("AdmitApproval = %+v, %v; want the reason redacted", a, err)
	}
	for _, c := range []struct {
		name, session, call, reason, by string
	}{
		{"bad session", "bad session", "c", "", messages.ApprovedByHTTP},
		{"no call", "s-1", "", "", messages.ApprovedByHTTP},
		{"long reason", "s-1", "c", strings.Repeat("x", 5000), messages.ApprovedByHTTP},
		{"timeout from outside", "s-1", "c", "", messages.ApprovedByTimeout},
	} {
		if _, err := in.AdmitApproval(c.session, c.call, false, c.reason, c.by); !errors.Is(err, node.ErrBadTask) {
			t.Errorf("%s: err = %v, want ErrBadTask", c.name, err)
		}
	}
	if _, err := in.DecodeApproval(node.Arrival{Source: node.SourceBus, Payload: []byte(`{"session_id":"s-1","call":"c"}`)}); !errors.Is(err, node.ErrBadTask) ||
		!strings.Contains(err.Error(), `without "approve"`) {
		t.Errorf("an answer without approve: %v", err)
	}
	if a, err := in.DecodeApproval(node.Arrival{Source: node.SourceBus, Payload: []byte(`{"session_id":"s-1","call":"c","approve":false}`)}); err != nil || a.By != messages.ApprovedByKafka {
		t.Errorf("an answer from Kafka: %+v, %v", a, err)
	}
	// Bytes that are not UTF-8 are refused, as in a task: encoding/json would record
	// U+FFFD in their place as the reason a human gave.
	if _, err := in.DecodeApproval(node.Arrival{Source: node.SourceBus, Payload: []byte("{\"session_id\":\"s-1\",\"call\":\"c\",\"approve\":false,\"reason\":\"no \xff\"}")}); !errors.Is(err, node.ErrBadTask) ||
		!strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("an answer that is not UTF-8: %v, want ErrBadTask", err)
	}
}
