package node

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// An answer to an approval written to the tasks topic with a member missing or
// of the wrong type, or without its type header (kcat -P with no -H
// type=task.approval), or with a typo in it, was poisoned with nothing on
// troupe.results (read as a task, it named no task_id its client knew): its
// client waited for ever. It reads an approval.refused keyed by its session,
// naming the session and the call it sent and saying why; one that names no
// session gets none, and the log says why.
func TestMalformedKafkaApprovalIsAnsweredByItsSessionAndCall(t *testing.T) {
	n, pub, logged := refusingNode(t, "")
	for i, c := range []struct {
		typ, key, body       string
		session, call, error string // "": no reply
	}{
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","approve":true}`, "s-1", "", "without session_id or call"},
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","call":"call_1"}`, "s-1", "call_1", `without "approve"`},
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","call":"call_2","approve":"yes"}`, "s-1", "call_2", "approve"},
		{messages.TypeApprovalAnswer, "s-2", `{"call":"call_3","approve":true}`, "s-2", "call_3", "without session_id or call"},
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","call":"call_4","approve":true,"by":"fax"}`, "s-1", "call_4", `by "fax"`},
		{"", "s-1", `{"session_id":"s-1","call":"call_5","approve":true}`, "s-1", "call_5", "type=task.approval"},
		{"task.aproval", "s-1", `{"session_id":"s-1","call":"call_6","approve":false}`, "s-1", "call_6", "unknown type"},
		{messages.TypeApprovalAnswer, "", `{"call":"call_7","approve":true}`, "", "", ""},
		{messages.TypeApprovalAnswer, "", `{"session_id":"not a session","call":"call_8","approve":true}`, "", "", ""},
		// Its members by their exact names, as DecodeApproval reads them:
		// encoding/json took "SESSION_ID" or "Call" (the last one) for them, and
		// the refusal went to a session the answer does not name, or named
		// another call.
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","call":"call_9","approve":true,"SESSION_ID":"s-2"}`, "s-1", "call_9", "SESSION_ID"},
		{"", "s-1", `{"session_id":"s-1","call":"call_10","approve":true,"Call":"call_0"}`, "s-1", "call_10", "type=task.approval"},
		{messages.TypeApprovalAnswer, "s-1", `{"call":"call_11","approve":true,"Session_Id":"s-2"}`, "s-1", "call_11", "Session_Id"},
		// Two sessions named: its client may wait in either.
		{messages.TypeApprovalAnswer, "s-1", `{"session_id":"s-1","call":"call_12","approve":true,"session_id":"s-2"}`, "", "", ""},
	} {
		m := message.NewMessage("kafka:troupe.tasks/0/9@"+string(rune('1'+i)), []byte(c.body))
		if c.key != "" {
			m.Metadata.Set(messages.MetaSessionID, c.key)
		}
		if c.typ != "" {
			m.Metadata.Set(messages.MetaType, c.typ)
		}
		if err := n.handleTask(m); !errors.Is(err, errPermanent) {
			t.Errorf("type=%q %s: %v; want poisoned", c.typ, c.body, err)
		}
		outs := pub.take()
		if c.session == "" {
			if len(outs) != 0 {
				t.Errorf("type=%q %s: published %d replies, want none (no session to key one by)", c.typ, c.body, len(outs))
			}
			continue
		}
		if len(outs) != 1 {
			t.Errorf("type=%q %s: published %d replies, want its approval.refused", c.typ, c.body, len(outs))
			continue
		}
		var r messages.ApprovalRefused
		if err := json.Unmarshal(outs[0].Payload, &r); err != nil {
			t.Fatal(err)
		}
		if typ, key := outs[0].Metadata.Get(messages.MetaType), outs[0].Metadata.Get(messages.MetaSessionID); typ != messages.TypeApprovalRefused || key != c.session ||
			r.SessionID != c.session || r.Call != c.call || r.Status != messages.StatusRefused || !strings.Contains(r.Error, c.error) {
			t.Errorf("type=%q %s: type %q session %q %+v; want approval.refused for session %s call %q saying %q", c.typ, c.body, typ, key, r, c.session, c.call, c.error)
		}
		m.Metadata.Set("again", "1") // read again: the same reply, by its message ID
		_ = n.handleTask(m)
		if again := pub.take(); len(again) != 1 || again[0].UUID != outs[0].UUID {
			t.Errorf("type=%q %s read again: %d replies, want one of ID %s", c.typ, c.body, len(again), outs[0].UUID)
		}
	}
	if !strings.Contains(logged.String(), "it names no session") {
		t.Errorf("the log says nothing of the answers that name no session:\n%s", logged)
	}
}

// keptByTopic is a publisher that keeps what it is given, by topic.
type keptByTopic struct {
	mu   sync.Mutex
	msgs map[string][]*message.Message
}

func (p *keptByTopic) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.msgs == nil {
		p.msgs = map[string][]*message.Message{}
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *keptByTopic) Close() error { return nil }

// take returns what was published on topic since it was last called, and
// forgets it.
func (p *keptByTopic) take(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.msgs[topic]
	delete(p.msgs, topic)
	return out
}

// A malformed answer to an approval read from a partition other than its
// session's (a kcat producer places keys by CRC32, the nodes by murmur2) was
// refused where it was read, at once: its refusal overtook an answer to the
// same call written before it, which that node forwarded to the session's owner
// and the session had not taken yet, and the client read its call's answer
// refused. It goes to the session's partition, as a refused task does, keeping
// its ID, and the session's owner refuses it there, after what came before it,
// under the ID the refusal had.
func TestMalformedKafkaApprovalIsRefusedByItsSessionsOwner(t *testing.T) {
	n, _, _ := refusingNode(t, "")
	pub := &keptByTopic{}
	n.pub, n.metrics, n.tasksSub = pub, newMetrics(), partitionZero{}
	owner := 1 // the session's partition; this node reads partition 0
	n.cfg.Bus = &Bus{Sharded: true, Partition: func(string, int) int { return owner }}
	n.own.total = 2
	for i, c := range []struct{ typ, body string }{
		{messages.TypeApprovalAnswer, `{"session_id":"s-1","call":"call_1"}`},
		{messages.TypeApprovalAnswer, `{"session_id":"s-1","call":"call_1","approve":true,"by":"fax"}`},
		{"", `{"session_id":"s-1","call":"call_1","approve":true}`},
		{"task.aproval", `{"session_id":"s-1","call":"call_1","approve":false}`},
	} {
		owner = 1
		m := message.NewMessage("kafka:troupe.tasks/0/7@"+string(rune('1'+i)), []byte(c.body))
		m.Metadata.Set(messages.MetaSessionID, "s-1")
		if c.typ != "" {
			m.Metadata.Set(messages.MetaType, c.typ)
		}
		if err := n.handleTask(m); err != nil {
			t.Errorf("type=%q %s read off its session's partition: %v; want it forwarded, and acked", c.typ, c.body, err)
		}
		if early := pub.take(messages.TopicResults); len(early) != 0 {
			t.Errorf("type=%q %s: refused where it was read, before its session's owner read what came before it: %s", c.typ, c.body, early[0].Payload)
		}
		copies := pub.take(messages.TopicTasks)
		if len(copies) != 1 {
			t.Errorf("type=%q %s: %d copies on %s; want it forwarded to its session's partition", c.typ, c.body, len(copies), messages.TopicTasks)
			continue
		}
		if copies[0].UUID != m.UUID || copies[0].Metadata.Get(messages.MetaSessionID) != "s-1" {
			t.Errorf("type=%q %s: copy %s keyed %q; want ID %s keyed s-1", c.typ, c.body, copies[0].UUID, copies[0].Metadata.Get(messages.MetaSessionID), m.UUID)
		}
		// Its owner reads the copy and refuses it, under the ID of the record.
		owner = 0
		if err := n.handleTask(copies[0]); !errors.Is(err, errPermanent) {
			t.Errorf("type=%q %s on its owner: %v; want poisoned", c.typ, c.body, err)
		}
		outs := pub.take(messages.TopicResults)
		if len(outs) != 1 || outs[0].UUID != refusedApprovalID("s-1", m.UUID) || outs[0].Metadata.Get(messages.MetaType) != messages.TypeApprovalRefused {
			t.Errorf("type=%q %s on its owner: %d replies; want its approval.refused, ID %s", c.typ, c.body, len(outs), refusedApprovalID("s-1", m.UUID))
		}
		if again := pub.take(messages.TopicTasks); len(again) != 0 {
			t.Errorf("type=%q %s: forwarded again by its owner", c.typ, c.body)
		}
	}
}
