package node_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A task.approval read from troupe.tasks that the session's owner refuses (here
// an answer by a call ID an earlier call of the session had, answered otherwise,
// which over HTTP is 409) was dropped with a warning in the owner's log: the Kafka client that sent
// it was never told. It gets an answer on troupe.results, keyed by its session
// and marked type=approval.refused, saying why (the 409's text: both keys,
// answer by key), and the call goes on waiting; the answer by key approves it.
func TestRefusedKafkaApprovalIsAnswered(t *testing.T) {
	k := newKafkaEnv(t)
	var sent atomic.Int64
	n := k.nodeWith(t, mailer(t, &sent))
	session := "ap-refused-" + time.Now().Format("150405.000000")
	approval := func(call string, approve bool) kgo.Message {
		return kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + session + `","call":"` + call + `","approve":` + strconv.FormatBool(approve) + `}`),
			Headers: []kgo.Header{{Key: messages.MetaType, Value: []byte(messages.TypeApprovalAnswer)}}}
	}
	task := kgo.Message{Key: []byte(session), Value: []byte(`{"input":"mail bob","agent":"mailer","session_id":"` + session + `"}`)}
	k.produce(t, task)
	first := waitApproval(t, n, session)
	k.produce(t, approval(first.Key, true))
	waitFor(t, 30*time.Second, "the first task completed", func() bool {
		events, _ := n.Log().Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskCompleted) == 1
	})
	k.produce(t, task)
	var second node.PendingApproval
	waitFor(t, 30*time.Second, "the second task's call waiting", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if p.SessionID == session && p.Key != first.Key {
				second = p
				return true
			}
		}
		return false
	})
	if second.Call != first.Call {
		t.Fatalf("the calls' IDs: %s and %s, want the same", first.Call, second.Call)
	}
	k.produce(t, approval(second.Call, false))
	type refusal struct {
		SessionID string `json:"session_id"`
		Call      string `json:"call"`
		Approve   bool   `json:"approve"`
		Status    string `json:"status"`
		Error     string `json:"error"`
	}
	var got []refusal
	waitFor(t, 30*time.Second, "an answer to the refused approval on "+messages.TopicResults, func() bool {
		got = got[:0]
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			for _, h := range m.Headers {
				if h.Key == messages.MetaType && string(h.Value) == "approval.refused" {
					var r refusal
					if err := json.Unmarshal(m.Value, &r); err != nil {
						t.Fatalf("%s: %v", m.Value, err)
					}
					got = append(got, r)
				}
			}
		}
		return len(got) > 0
	})
	r := got[0]
	if len(got) != 1 || r.SessionID != session || r.Call != second.Call || r.Approve || r.Status != "refused" ||
		!strings.Contains(r.Error, first.Key) || !strings.Contains(r.Error, second.Key) || !strings.Contains(r.Error, "answer by key") {
		t.Fatalf("the refusals: %+v; want one for call %s naming %s and %s", got, second.Call, first.Key, second.Key)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1: the refused answer approved the second task's call", sent.Load())
	}
	if again := waitApproval(t, n, session); again.Key != second.Key {
		t.Fatalf("the call waiting: %+v, want %+v", again, second)
	}
	k.produce(t, approval(second.Key, true))
	waitFor(t, 30*time.Second, "the second task completed", func() bool {
		events, _ := n.Log().Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskCompleted) == 2
	})
	if sent.Load() != 2 {
		t.Fatalf("%d emails sent, want 2", sent.Load())
	}
}

// An answer for a session the log does not have (a typo in the session ID) is
// told so on troupe.results, as over HTTP (404), not that the session waits for
// no approval, and starts no session.
func TestKafkaApprovalOfAnUnknownSessionIsAnswered(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.node(t)
	session := "ap-nosuch-" + time.Now().Format("150405.000000")
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + session + `","call":"call_1","approve":true}`),
		Headers: []kgo.Header{{Key: messages.MetaType, Value: []byte(messages.TypeApprovalAnswer)}}})
	var refusal struct {
		SessionID string `json:"session_id"`
		Status    string `json:"status"`
		Error     string `json:"error"`
	}
	waitFor(t, 30*time.Second, "an answer to the approval on "+messages.TopicResults, func() bool {
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			for _, h := range m.Headers {
				if h.Key == messages.MetaType && string(h.Value) == messages.TypeApprovalRefused {
					if err := json.Unmarshal(m.Value, &refusal); err != nil {
						t.Fatalf("%s: %v", m.Value, err)
					}
					return true
				}
			}
		}
		return false
	})
	if refusal.SessionID != session || refusal.Status != "refused" || !strings.Contains(refusal.Error, "no such session") {
		t.Fatalf("the refusal: %+v; want it to say there is no such session", refusal)
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range infos {
		if s.ID == session {
			t.Fatalf("the answer wrote session %s", session)
		}
	}
}

// An answer by call ID that landed (the call approved, its task completed), sent
// again by its client, or read again, once the session moved on to a later call
// that the model gave the same call ID, may be meant for that call as well as
// the first: it answers neither, and is refused on troupe.results as over HTTP
// (409), naming the call that took it (key, duplicate: that very answer) and the
// call waiting (waiting), to be answered by key; no approval.taken is published,
// which a client that meant the call waiting would read as its answer taken.
func TestKafkaApprovalByACallIDAfterTheSessionMovedOnIsRefused(t *testing.T) {
	k := newKafkaEnv(t)
	var sent atomic.Int64
	n := k.nodeWith(t, mailer(t, &sent))
	session := "ap-taken-" + time.Now().Format("150405.000000")
	task := kgo.Message{Key: []byte(session), Value: []byte(`{"input":"mail bob","agent":"mailer","session_id":"` + session + `"}`)}
	k.produce(t, task)
	first := waitApproval(t, n, session)
	answer := func() kgo.Message {
		return kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + session + `","call":"` + first.Call + `","approve":true}`),
			Headers: []kgo.Header{{Key: messages.MetaType, Value: []byte(messages.TypeApprovalAnswer)}}}
	}
	k.produce(t, answer())
	waitFor(t, 30*time.Second, "the first task completed", func() bool {
		events, _ := n.Log().Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskCompleted) == 1
	})
	k.produce(t, task)
	var second node.PendingApproval
	waitFor(t, 30*time.Second, "the second task's call waiting", func() bool {
		list, err := n.PendingApprovals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			if p.SessionID == session && p.Key != first.Key {
				second = p
				return true
			}
		}
		return false
	})
	if second.Call != first.Call {
		t.Fatalf("the calls' IDs: %s and %s, want the same", first.Call, second.Call)
	}
	k.produce(t, answer()) // the client's retry, or an answer meant for the second call
	var refused messages.ApprovalRefused
	var types []string
	waitFor(t, 30*time.Second, "an answer to the approval sent again on "+messages.TopicResults, func() bool {
		types = types[:0]
		found := false
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			for _, h := range m.Headers {
				if h.Key != messages.MetaType {
					continue
				}
				types = append(types, string(h.Value))
				if string(h.Value) == messages.TypeApprovalRefused {
					if err := json.Unmarshal(m.Value, &refused); err != nil {
						t.Fatalf("%s: %v", m.Value, err)
					}
					found = true
				}
			}
		}
		return found
	})
	if refused.SessionID != session || refused.Call != first.Call || refused.Key != first.Key || refused.Waiting != second.Key || !refused.Duplicate ||
		!refused.Approve || refused.Status != messages.StatusRefused || !strings.Contains(refused.Error, "nothing was done") {
		t.Fatalf("the answer to the approval sent again: %+v; want it refused, taken for %s, naming %s as waiting", refused, first.Key, second.Key)
	}
	for _, typ := range types {
		if typ == messages.TypeApprovalTaken {
			t.Fatalf("it was told taken (records of types %v)", types)
		}
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1: the answer approved the second task's call", sent.Load())
	}
	if again := waitApproval(t, n, session); again.Key != second.Key {
		t.Fatalf("the call waiting: %+v, want %+v", again, second)
	}
}
