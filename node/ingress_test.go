package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A malformed message on the tasks topic goes to the poison topic with its reason and
// does not block the messages behind it; a redelivered message is handled once.
func TestBadBusMessagesArePoisonedAndDuplicatesSkipped(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	bad := message.NewMessage("bad-1", []byte(`{"id": "x", "session_id": `))
	// The embedded bus hands the poisoned copy over synchronously: publish in the
	// background while this test reads the poison topic.
	go func() {
		if err := n.Bus().Publish(messages.TopicTasks, bad); err != nil {
			t.Error(err)
		}
	}()
	select {
	case p := <-poisoned:
		p.Ack()
		if p.UUID != "bad-1" || !strings.Contains(p.Metadata.Get(middleware.ReasonForPoisonedKey), "malformed JSON") {
			t.Fatalf("poisoned %s: %q", p.UUID, p.Metadata.Get(middleware.ReasonForPoisonedKey))
		}
	case <-ctx.Done():
		t.Fatal("the malformed task never reached the poison topic")
	}
	// The next task goes through (to its end, so that the session no longer changes on
	// its own), and a redelivery of it is skipped.
	id := "after-poison"
	nodetest.Run(t, n, id, "echo fine")
	events := nodetest.Run(t, n, "after-poison-2", "echo two")
	if len(events) == 0 {
		t.Fatal("no events")
	}
	first, _ := n.Log().Read(ctx, id, 1)
	dup := message.NewMessage(first[0].ID, mustEnvelope(t, first[0]))
	if err := n.Bus().Publish(messages.TopicTasks, dup); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if strings.Contains(body, `troupe_bus_poisoned_total{handler="tasks"} 1`) &&
			strings.Contains(body, `troupe_bus_duplicates_total{handler="tasks"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after, _ := n.Log().Read(ctx, id, 1)
	if len(after) != len(first) {
		t.Fatalf("a duplicate changed the session: %d events, had %d", len(after), len(first))
	}
}

func mustEnvelope(t *testing.T, e messages.Envelope) []byte {
	t.Helper()
	b, err := messages.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A task from the bus (a Kafka client's plain JSON, or an envelope) passes the same
// validation as POST /v1/tasks: an overflowing deadline_ms or a reply_topic that is
// one of the node's own topics sends it to the poison topic with the reason, and no
// session is written.
func TestBusTasksWithBadDeadlineOrReplyTopicArePoisoned(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	loop, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "echo x", ReplyTopic: messages.TopicTasks})
	if err != nil {
		t.Fatal(err)
	}
	loop.ID, loop.SessionID, loop.TS, loop.Actor = "env-loop", "env-loop", 1, "ingress"
	cases := []struct {
		id, body, reason string
	}{
		{"json-deadline", `{"input":"echo x","session_id":"json-deadline","deadline_ms":9223372036854775807}`, "deadline_ms"},
		{"json-loop", `{"input":"echo x","session_id":"json-loop","reply_topic":"troupe.tasks"}`, "reply_topic"},
		{"json-prefixed", `{"input":"echo x","session_id":"json-prefixed","reply_topic":"prod.troupe.results"}`, "reply_topic"},
		{"json-slash", `{"input":"echo x","session_id":"json-slash","reply_topic":"a/b"}`, "reply_topic"},
		{"json-blank", `{"input":"   ","session_id":"json-blank"}`, "input"},
		{"json-dup", `{"input":"echo x","input":"echo y","session_id":"json-dup"}`, "duplicate key"},
		{"env-loop", string(mustEnvelope(t, loop)), "reply_topic"},
		// Latin-1 from a producer: "café" would run as "caf\ufffd".
		{"json-latin1", "{\"input\":\"echo caf\xe9\",\"session_id\":\"json-latin1\"}", "not valid UTF-8 (byte 18)"},
	}
	for _, c := range cases {
		msg := message.NewMessage(c.id, []byte(c.body))
		go func() {
			if err := n.Bus().Publish(messages.TopicTasks, msg); err != nil {
				t.Error(err)
			}
		}()
		select {
		case p := <-poisoned:
			p.Ack()
			if reason := p.Metadata.Get(middleware.ReasonForPoisonedKey); p.UUID != c.id || !strings.Contains(reason, c.reason) {
				t.Errorf("%s: poisoned %s with %q, want a reason naming %s", c.id, p.UUID, reason, c.reason)
			}
		case <-ctx.Done():
			t.Fatalf("%s never reached the poison topic", c.id)
		}
	}
	infos, err := n.Log().Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 0 {
		t.Fatalf("poisoned tasks wrote sessions: %v %v", infos, err)
	}
}

// A task.submitted envelope a Kafka client publishes whole on the tasks topic passes
// the session ID rule a plain task does: a session ID with a '/' or a space, or a
// credential-shaped one, is poisoned with the reason, and no session is written.
func TestBusEnvelopeSessionIDFollowsTheRule(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	for i, sid := range []string{"a/b", "has space", "-leading-dash", strings.Repeat("x", 129), "sk-proj-abcdefghijklmnopqrstuvwxyz012345"} {
		env, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "echo x"})
		if err != nil {
			t.Fatal(err)
		}
		env.ID, env.SessionID, env.TS, env.Actor = fmt.Sprintf("env-bad-%d", i), sid, 1, "ingress"
		msg := message.NewMessage(env.ID, mustEnvelope(t, env))
		go func() {
			if err := n.Bus().Publish(messages.TopicTasks, msg); err != nil {
				t.Error(err)
			}
		}()
		select {
		case p := <-poisoned:
			p.Ack()
			if reason := p.Metadata.Get(middleware.ReasonForPoisonedKey); p.UUID != env.ID || !strings.Contains(reason, "session_id") {
				t.Errorf("session %q: poisoned %s with %q, want a reason naming session_id", sid, p.UUID, reason)
			}
		case <-ctx.Done():
			t.Fatalf("session %q: the envelope never reached the poison topic", sid)
		}
	}
	infos, err := n.Log().Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 0 {
		t.Fatalf("envelopes with bad session IDs wrote sessions: %v %v", infos, err)
	}
}

// A message on the tasks topic whose type header this node does not know (a typo
// in a producer's header, "task.cancle") is not run as a task, whatever its body:
// it goes to the poison topic with a reason naming the type, and no session is
// written. Before, anything but the known command types was read as a task, so a
// mistyped cancellation with a task-shaped body started work.
//
// A header whose name is "type" in another case (kcat -H Type=…) is read as the
// type (TestKafkaCancelWithATypeHeaderInAnotherCase), so a typo there is refused
// the same way, naming the header; type headers that disagree are refused, naming
// each, rather than one picked (before, a Type header was not read: the message
// ran as a task whatever it said).
func TestBusMessageOfUnknownTypeIsPoisoned(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	task := func(id string) string { return `{"input":"echo x","session_id":"` + id + `"}` }
	cases := []struct {
		id      string
		headers map[string]string
		body    string
		want    string
	}{
		{"typo-task", map[string]string{"type": "task.cancle"}, task("typo-task"), `unknown type "task.cancle" (header "type")`},
		{"typo-cancel", map[string]string{"type": "task.cancle"}, `{"v":1,"session_id":"typo-cancel","reason":"stop"}`, `unknown type "task.cancle"`},
		{"other-case", map[string]string{"type": "Task.Submitted"}, task("other-case"), `unknown type "Task.Submitted"`},
		{"typo-header-case", map[string]string{"Type": "task.cancle"}, task("typo-header-case"), `unknown type "task.cancle" (header "Type")`},
		{"disagree-exact", map[string]string{"type": "task.submitted", "Type": "task.cancel"}, task("disagree-exact"),
			`type headers disagree ("Type"="task.cancel", "type"="task.submitted")`},
		{"disagree-cases", map[string]string{"TYPE": "task.submitted", "Type": "task.cancel"}, task("disagree-cases"),
			`type headers disagree ("TYPE"="task.submitted", "Type"="task.cancel")`},
		{"disagree-empty", map[string]string{"type": "", "tYpE": "task.cancel"}, task("disagree-empty"),
			`type headers disagree ("tYpE"="task.cancel", "type"="")`},
	}
	for _, c := range cases {
		msg := message.NewMessage(c.id, []byte(c.body))
		for k, v := range c.headers {
			msg.Metadata.Set(k, v)
		}
		go func() {
			if err := n.Bus().Publish(messages.TopicTasks, msg); err != nil {
				t.Error(err)
			}
		}()
		select {
		case p := <-poisoned:
			p.Ack()
			if reason := p.Metadata.Get(middleware.ReasonForPoisonedKey); p.UUID != c.id || !strings.Contains(reason, c.want) {
				t.Errorf("%s: poisoned %s with %q, want a reason saying %s", c.id, p.UUID, reason, c.want)
			}
		case <-ctx.Done():
			t.Fatalf("%s (headers %v) never reached the poison topic", c.id, c.headers)
		}
	}
	// A task sent after them runs: the partition moved on.
	nodetest.Run(t, n, "after-typo", "echo fine")
	infos, err := n.Log().Sessions(ctx, eventlog.Filter{SessionsOnly: true}) // not its agent's configuration's stream
	if err != nil || len(infos) != 1 || infos[0].ID != "after-typo" {
		t.Fatalf("messages of unknown types wrote sessions: %v %v", infos, err)
	}
}
