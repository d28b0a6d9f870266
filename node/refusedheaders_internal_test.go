package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// keptResults is a publisher that keeps what it is given.
type keptResults struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *keptResults) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if topic != messages.TopicResults {
		return errors.New("published to " + topic)
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *keptResults) Close() error { return nil }

// take returns what was published since it was last called, and forgets it.
func (p *keptResults) take() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.msgs
	p.msgs = nil
	return out
}

// refusingNode is a node with what handleTask's refusals and rejectTask use: a
// log, an ingress (whose redactor knows secret), a publisher keeping results,
// and a log of its own.
func refusingNode(t *testing.T, secret string) (*Node, *keptResults, *syncBuffer) {
	t.Helper()
	log, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	pub, logged := &keptResults{}, &syncBuffer{}
	n := &Node{cfg: Config{Logger: slog.New(slog.NewTextHandler(logged, nil))}, log: log, pub: pub,
		ingress: newIngress(redact.New(secret), nil, actors.UUIDv7{})}
	return n, pub, logged
}

// A record of the tasks topic refused before it is decoded, for its headers (a
// header given different values, a session_id header other than its key, type
// headers that disagree, a type this node does not know), went to troupe.poison
// and nowhere else: its client, waiting for the result of its task_id, waited
// for ever. When its body says where that client waits, by the rules a task
// refused by decode is answered, it gets the same rejected result, the same when
// the record is read again; the session or the ID its headers leave in doubt
// names nothing (only the body's then does), the headers' values are not echoed
// (the list of repeated ones cuts them where a secret may run on), a type
// holding a secret is echoed redacted, and a record whose body says nothing
// usable gets no result, the log saying why.
func TestRefusalBeforeDecodingIsAnswered(t *testing.T) {
	const secret = "s3cr3t-Value-0123456789abcdef"
	n, pub, logged := refusingNode(t, secret)
	pad := strings.Repeat("a", 50)
	longName := strings.Repeat("n", 3000)
	type want struct {
		session, task, says string
	}
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		want    *want  // nil: no result
		why     string // the log's reason when there is none
	}{
		{"type given two values",
			map[string]string{messages.MetaRepeatedHeaders: `"type"="task.submitted", "type"="task.cancel"`, "type": "task.cancel", messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-1","reply_topic":"replies.me"}`,
			&want{"s-1", "q-1", `more than one value to the header "type"`}, ""},
		{"type given two values, one holding a secret",
			map[string]string{messages.MetaRepeatedHeaders: `"type"="` + pad + secret[:14] + `"… (79 bytes), "type"="task.cancel"`, "type": "task.cancel", messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-2"}`,
			&want{"s-1", "q-2", `"type"`}, ""},
		{"unknown type", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-3"}`, &want{"s-1", "q-3", `unknown type "task.cancle"`}, ""},
		{"unknown type holding a secret", map[string]string{"type": pad + secret, messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-4"}`, &want{"s-1", "q-4", "unknown type"}, ""},
		{"type headers disagree", map[string]string{"type": "task.submitted", "Type": "task.cancel", messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-5"}`, &want{"s-1", "q-5", "type headers disagree"}, ""},
		{"unknown type, a long task_id", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"` + longName + `"}`, &want{"s-1", longName, "unknown type"}, ""},
		{"unknown type, no task_id: the record's ID", map[string]string{"type": "task.cancle"},
			`{"input":"x","session_id":"s-6"}`, &want{"s-6", "m-1", "unknown type"}, ""},
		{"key and session_id header differ, the body's session",
			map[string]string{messages.MetaRepeatedHeaders: `key="s-1", "session_id"="s-2"`, messages.MetaSessionID: "s-2"},
			`{"input":"x","task_id":"q-7","session_id":"s-7"}`, &want{"s-7", "q-7", "a session_id header other than its key"}, ""},
		{"key and session_id header differ, no session in the body",
			map[string]string{messages.MetaRepeatedHeaders: `key="s-1", "session_id"="s-2"`, messages.MetaSessionID: "s-2"},
			`{"input":"x","task_id":"q-8"}`, nil, "names no session_id"},
		{"session_id given two values, no session in the body",
			map[string]string{messages.MetaRepeatedHeaders: `"session_id"="s-1", "session_id"="s-2"`, messages.MetaSessionID: "s-2"},
			`{"input":"x","task_id":"q-9"}`, nil, "names no session_id"},
		{"ID header given two values, a task_id",
			map[string]string{messages.MetaRepeatedHeaders: `"` + kafka.HeaderUUID + `"="m-0", "` + kafka.HeaderUUID + `"="m-1"`, messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-10"}`, &want{"s-1", "q-10", `"` + kafka.HeaderUUID + `"`}, ""},
		{"ID header given two values, no task_id",
			map[string]string{messages.MetaRepeatedHeaders: `"` + kafka.HeaderUUID + `"="m-0", "` + kafka.HeaderUUID + `"="m-1"`, messages.MetaSessionID: "s-1"},
			`{"input":"x"}`, nil, "ID header more than one value"},
		{"a list that does not parse", map[string]string{messages.MetaRepeatedHeaders: `type=a, type=b`, messages.MetaSessionID: "s-1"},
			`{"input":"x","task_id":"q-11"}`, nil, "names no session_id"},
		// Refused now for having no input (a body that is no task's is not answered) before its keys are read.
		{"unknown type, a cancellation's body", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			`{"v":1,"session_id":"s-1","reason":"stop"}`, nil, "so it may be no task"},
		{"a command's type in another case, a task's body", map[string]string{"Type": "Task.Cancel", messages.MetaSessionID: "s-1"},
			`{"input":"x","session_id":"s-1","task_id":"q-12"}`, &want{"s-1", "q-12", "unknown type"}, ""},
		{"unknown type, no value", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			``, nil, "no value"},
		{"unknown type, a stored task", map[string]string{"type": "task.cancle", messages.MetaStored: "bus.task.m-1", messages.MetaSessionID: "s-1"},
			`{}`, nil, "stored task"},
	}
	seen := ""
	for _, c := range cases {
		msg := func() *message.Message {
			m := message.NewMessage("m-1", []byte(c.body))
			for k, v := range c.headers {
				m.Metadata.Set(k, v)
			}
			return m
		}
		err := n.handleTask(msg())
		if !errors.Is(err, errPermanent) {
			t.Errorf("%s: %v; want the record poisoned", c.name, err)
			continue
		}
		got := pub.take()
		log := strings.TrimPrefix(logged.String(), seen)
		seen = logged.String()
		if c.want == nil {
			if len(got) != 0 {
				t.Errorf("%s: published %s; want nothing", c.name, got[0].Payload)
			}
			if !strings.Contains(log, "no result published") || !strings.Contains(log, c.why) {
				t.Errorf("%s: logged %q; want it to say no result was published, because %s", c.name, log, c.why)
			}
			continue
		}
		if len(got) != 1 {
			t.Errorf("%s: published %d results; want one", c.name, len(got))
			continue
		}
		var res messages.TaskResult
		if err := json.Unmarshal(got[0].Payload, &res); err != nil {
			t.Fatal(err)
		}
		w := c.want
		if res.SessionID != w.session || res.TaskID != w.task || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected ||
			!strings.HasPrefix(res.Error, ErrBadTask.Error()) || !strings.Contains(res.Error, w.says) {
			t.Errorf("%s: %+v; want session %s, task %.20s, failed, rejected, its error saying %s", c.name, res, w.session, w.task, w.says)
		}
		if strings.Contains(res.Error, secret[:14]) {
			t.Errorf("%s: error %q echoes the secret's head", c.name, res.Error)
		}
		if _, repeated := c.headers[messages.MetaRepeatedHeaders]; repeated && strings.Contains(res.Error, "=") {
			t.Errorf("%s: error %q echoes the repeated headers' values", c.name, res.Error)
		}
		if id := got[0].UUID; id != rejectedID(w.session, w.task) || len(id) > MaxTaskMessageID {
			t.Errorf("%s: message ID %.80q (%d bytes); want rejectedID's, at most %d bytes", c.name, id, len(id), MaxTaskMessageID)
		}
		// Read again: the same result, the same ID.
		if err := n.handleTask(msg()); !errors.Is(err, errPermanent) {
			t.Errorf("%s, read again: %v", c.name, err)
		}
		again := pub.take()
		seen = logged.String()
		if len(again) != 1 || again[0].UUID != got[0].UUID || !bytes.Equal(again[0].Payload, got[0].Payload) {
			t.Errorf("%s, read again: %d results; want the same one", c.name, len(again))
		}
	}
}

// The rejected result of a task named q-1 was published as "q-1/rejected"
// whatever its session: a consumer deduping by message ID dropped the second
// session's, whose client then waited for ever; and a long name (a task_id the
// rules refuse for its length, up to maxRejectionID bytes) made an ID as long,
// over MaxTaskMessageID. The ID is one per session and task_id, the same when
// the record is read again, and short whatever the name.
func TestRejectedResultIDIsOnePerSessionAndTaskID(t *testing.T) {
	n, pub, _ := refusingNode(t, "")
	long := strings.Repeat("x", maxRejectionID)
	reject := func(session, taskID string) *message.Message {
		t.Helper()
		msg := message.NewMessage("m-1", []byte(`{"input":"x","task_id":"`+taskID+`","max_steps":-1}`))
		msg.Metadata.Set(messages.MetaSessionID, session)
		a := arrivalOf(msg)
		_, refusal := n.ingress.Decode(a)
		if !errors.Is(refusal, ErrBadTask) {
			t.Fatalf("decode: %v; want a refusal", refusal)
		}
		if err := n.rejectTask(msg, a, refusal); err != nil {
			t.Fatal(err)
		}
		got := pub.take()
		if len(got) != 1 {
			t.Fatalf("session %s, task %.20s: %d results published; want one", session, taskID, len(got))
		}
		return got[0]
	}
	ids := map[string]string{}
	for _, session := range []string{"s-1", "s-2"} {
		for _, taskID := range []string{"q-1", long} {
			out := reject(session, taskID)
			if len(out.UUID) > MaxTaskMessageID {
				t.Errorf("session %s, task %.20s: message ID of %d bytes; want at most %d", session, taskID, len(out.UUID), MaxTaskMessageID)
			}
			if other, ok := ids[out.UUID]; ok {
				t.Errorf("session %s, task %.20s: message ID %.80q, also %s's", session, taskID, out.UUID, other)
			}
			ids[out.UUID] = session + " " + taskID[:min(len(taskID), 20)]
			if again := reject(session, taskID); again.UUID != out.UUID || !bytes.Equal(again.Payload, out.Payload) {
				t.Errorf("session %s, task %.20s read again: ID %.80q, %s; want %.80q, %s", session, taskID, again.UUID, again.Payload, out.UUID, out.Payload)
			}
		}
	}
}

// A command of the tasks topic whose type header is not read as its type (a
// typo in it, another case, two type headers that disagree, one given twice),
// or whose session_id header is not its key, was answered as a task refused
// for its headers: the bare cancellation {"session_id":"s-1"} gave session s-1
// a failed "rejected" result, which a client waiting for the result of s-1 (a
// task sent without a task_id, named by its record's coordinates) took for its
// task's, which ran on. A record whose body is no task's (no "input" member)
// is poisoned and answered by nothing, the log saying why and which command
// type its type header is near; but an approval's (a "call" member), whose
// client reads its session's replies to approvals, by an approval.refused
// (refuseMalformedApproval), no task's result.
func TestRefusedCommandIsNotAnsweredAsATask(t *testing.T) {
	n, pub, logged := refusingNode(t, "")
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		near    string // the command type the log names, "" for none
	}{
		{"typo, no task_id", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1"}`, "task.cancel"},
		{"typo, a task_id", map[string]string{"type": "task.cancle", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1","task_id":"t-1"}`, "task.cancel"},
		{"typo, no session_id header", map[string]string{"type": "task.cancell"},
			`{"session_id":"s-1"}`, "task.cancel"},
		{"another case", map[string]string{"Type": "Task.Cancel", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1"}`, "task.cancel"},
		{"type headers disagree", map[string]string{"type": "task.cancel", "Type": "task.submitted", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1","task_id":"t-1"}`, "task.cancel"},
		{"type given twice", map[string]string{messages.MetaRepeatedHeaders: `"type"="task.submitted", "type"="task.cancel"`, "type": "task.cancel", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1"}`, "task.cancel"},
		{"a session_id header other than its key", map[string]string{messages.MetaRepeatedHeaders: `key="s-2", "session_id"="s-1"`, "type": "task.cancel", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1"}`, "task.cancel"},
		{"an approval, typo", map[string]string{"type": "task.aproval", messages.MetaSessionID: "s-1"},
			`{"session_id":"s-1","call":"c-1","approve":true}`, "task.approval"},
	}
	seen := ""
	for _, c := range cases {
		m := message.NewMessage("kafka:troupe.tasks/0/7@1", []byte(c.body))
		for k, v := range c.headers {
			m.Metadata.Set(k, v)
		}
		if err := n.handleTask(m); !errors.Is(err, errPermanent) {
			t.Errorf("%s: %v; want the record poisoned", c.name, err)
		}
		outs := pub.take()
		if c.near == messages.TypeApprovalAnswer {
			if len(outs) != 1 || outs[0].Metadata.Get(messages.MetaType) != messages.TypeApprovalRefused || !strings.Contains(string(outs[0].Payload), `"call":"c-1"`) {
				t.Errorf("%s: published %d records; want an approval.refused of call c-1", c.name, len(outs))
			}
			continue
		}
		for _, out := range outs {
			t.Errorf("%s: published %s; want nothing: the record may be a command, not a task", c.name, out.Payload)
		}
		log := strings.TrimPrefix(logged.String(), seen)
		seen = logged.String()
		if !strings.Contains(log, "no result published") || !strings.Contains(log, `no \"input\"`) {
			t.Errorf("%s: logged %q; want it to say no result was published, the body having no input", c.name, log)
		}
		if c.near != "" && !strings.Contains(log, `near \"`+c.near+`\"`) {
			t.Errorf("%s: logged %q; want it to name %s", c.name, log, c.near)
		}
	}
}

// commandTypeNear finds the command a type header meant when it differs by its
// case or by up to two edits, and nothing for a task's type or one far from all.
func TestCommandTypeNear(t *testing.T) {
	for typ, want := range map[string]string{
		"task.cancel": "task.cancel", "Task.Cancel": "task.cancel", "task.cancle": "task.cancel", "task.cancell": "task.cancel",
		"task.canceled": "task.cancel", "TASK.APROVAL": "task.approval", "memory.comand": "memory.command", "delta.watch": "deltas.watch",
		"task.submitted": "", "task.submited": "", "": "", "cancel": "", "task.cancellation": "",
	} {
		if got := commandTypeNear(typ); got != want {
			t.Errorf("commandTypeNear(%q) = %q; want %q", typ, got, want)
		}
	}
}

// A record read as a task (no type header) whose body has no "input", only a
// session_id and/or a task_id (a task whose input was left out, or a command
// sent without its type header), went to troupe.poison with no result: its
// sender waited for ever. It is answered with a rejected result marked
// type=task.rejected, keyed by its session (the body's, else the record's key),
// naming its task_id (else the record's ID) and saying that "input" is missing
// and how a command is typed; the record is still poisoned, and a task's body
// refused by decode is answered as before.
func TestBodyWithoutInputIsAnswered(t *testing.T) {
	n, pub, logged := refusingNode(t, "")
	for i, c := range []struct{ body, session, task string }{
		{`{"session_id":"s-1"}`, "s-1", "kafka:troupe.tasks/0/9@1"},
		{`{"session_id":"s-1","task_id":"t-1"}`, "s-1", "t-1"},
		{`{"task_id":"t-2"}`, "s-key", "t-2"},
		{`{}`, "s-key", "kafka:troupe.tasks/0/9@4"},
	} {
		m := message.NewMessage("kafka:troupe.tasks/0/9@"+string(rune('1'+i)), []byte(c.body))
		m.Metadata.Set(messages.MetaSessionID, "s-key")
		if c.session != "s-key" {
			m.Metadata.Set(messages.MetaSessionID, c.session)
		}
		if err := n.handleTask(m); !errors.Is(err, errPermanent) {
			t.Errorf("%s: %v; want the record poisoned", c.body, err)
		}
		outs := pub.take()
		if len(outs) != 1 {
			t.Errorf("%s: published %d results; want its rejected result", c.body, len(outs))
			continue
		}
		var res messages.TaskResult
		if err := json.Unmarshal(outs[0].Payload, &res); err != nil {
			t.Fatal(err)
		}
		if res.SessionID != c.session || res.TaskID != c.task || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected ||
			!strings.Contains(res.Error, `no "input"`) || !strings.Contains(res.Error, "type="+messages.TypeApprovalAnswer) ||
			outs[0].Metadata.Get(messages.MetaSessionID) != c.session || outs[0].Metadata.Get(messages.MetaType) != messages.TypeTaskRejected {
			t.Errorf("%s: published %s %v; want session %s, task %s rejected for its missing input, marked %s", c.body, outs[0].Payload, outs[0].Metadata, c.session, c.task, messages.TypeTaskRejected)
		}
	}
	// A body with a member of a command's and none of a task's is a command's:
	// it gets no task's result, its log line saying why; an approval's (a
	// "call" member) gets an approval.refused, which its client reads.
	for _, body := range []string{`{"session_id":"s-1","call":"c-1","approve":true}`, `{"session_id":"s-1","reason":"stop"}`} {
		m := message.NewMessage("kafka:troupe.tasks/0/11@1", []byte(body))
		m.Metadata.Set(messages.MetaSessionID, "s-1")
		if err := n.handleTask(m); !errors.Is(err, errPermanent) {
			t.Errorf("%s: %v; want the record poisoned", body, err)
		}
		outs := pub.take()
		if strings.Contains(body, `"call"`) {
			if len(outs) != 1 || outs[0].Metadata.Get(messages.MetaType) != messages.TypeApprovalRefused {
				t.Errorf("%s: published %d records; want its approval.refused", body, len(outs))
			}
			continue
		}
		for _, out := range outs {
			t.Errorf("%s: published %s; want nothing: the record is a command's", body, out.Payload)
		}
	}
	if log := logged.String(); !strings.Contains(log, "no result published") {
		t.Errorf("logged %q; want it to say no result was published for the commands' bodies", log)
	}
	m := message.NewMessage("kafka:troupe.tasks/0/10@1", []byte(`{"session_id":"s-1","task_id":"t-3","input":"hi","max_steps":-1}`))
	m.Metadata.Set(messages.MetaSessionID, "s-1")
	if err := n.handleTask(m); !errors.Is(err, errPermanent) {
		t.Errorf("a bad task: %v; want the record poisoned", err)
	}
	if outs := pub.take(); len(outs) != 1 || !strings.Contains(string(outs[0].Payload), `"rejected"`) || strings.Contains(string(outs[0].Payload), `no \"input\"`) {
		t.Errorf("a bad task's body: published %d results; want its rejected result, for its max_steps", len(outs))
	}
}
