package node

import (
	"encoding/json"
	"errors"
	"strings"
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
