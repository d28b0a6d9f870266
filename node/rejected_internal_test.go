package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// The result of a task of the tasks topic refused as bad echoes what the client
// sent only through the redactor (a secret in the agent's name, the session_id),
// bounded, and the same each time the record is read; a task that cannot be
// named back (a task_id holding a secret, malformed JSON, a sub-agent's
// envelope) gets none, and neither does its reply topic when the rules refuse it.
func TestRejectionRedactsAndNamesTheTaskAsTheClientMatchesIt(t *testing.T) {
	in := newIngress(redact.New(), nil, actors.UUIDv7{})
	const secret = "sk-abcdefghijklmnopqrstuvwxyz012345"
	bus := func(payload, key string) Arrival {
		return Arrival{Source: SourceBus, Payload: []byte(payload), MessageID: "kafka:troupe.tasks/1/7@1764930000123", Key: key}
	}
	reject := func(a Arrival) (rejection, bool) {
		t.Helper()
		_, err := in.Decode(a)
		if !errors.Is(err, ErrBadTask) {
			t.Fatalf("%s: %v; want a refusal", a.Payload, err)
		}
		return in.rejection(a, err)
	}
	a := bus(`{"input":"x","agent":"`+secret+`","reply_topic":"replies.me"}`, "s-1")
	r, ok := reject(a)
	if !ok || strings.Contains(r.result.Error, secret) || !strings.Contains(r.result.Error, "agent") || r.reply != "replies.me" ||
		r.result.SessionID != "s-1" || r.result.TaskID != a.MessageID || r.result.Reason != messages.ReasonRejected || !r.session {
		t.Errorf("an unknown agent holding a secret: %+v (%v); want its error redacted, session s-1, the record's ID", r, ok)
	}
	if again, _ := reject(a); again.result != r.result {
		t.Errorf("read again: %+v; want %+v", again.result, r.result)
	}
	r, ok = reject(bus(`{"input":"x","task_id":"q-1","session_id":"`+secret+`"}`, ""))
	if !ok || strings.Contains(r.result.SessionID+r.result.Error, secret) || r.session || r.result.TaskID != "q-1" {
		t.Errorf("a session_id holding a secret: %+v (%v); want it redacted, task q-1", r, ok)
	}
	r, ok = reject(bus(`{"input":"x","max_steps":-1,"task_id":"q-1","reply_topic":"troupe.results"}`, ""))
	if !ok || r.reply != "" || r.result.SessionID != "task.q-1" {
		t.Errorf("a refused reply topic: %+v (%v); want no reply topic, session task.q-1", r, ok)
	}
	r, ok = reject(bus(`{"input":"`+strings.Repeat("x", 2<<20)+`","task_id":"q-1"}`, "s-1"))
	if !ok || len(r.result.Error) > maxRejectionError+len("…") {
		t.Errorf("an input over the limit: %d bytes of error (%v)", len(r.result.Error), ok)
	}
	for _, p := range []string{
		`{"input":"x","task_id":"` + secret + `"}`,
		`{"input":"x","max_steps":-1,"max_steps":1}`,
		`{"input":"x","session_id":7}`,
	} {
		if r, ok := reject(bus(p, "s-1")); ok {
			t.Errorf("%s: %+v; want no result", p, r)
		}
	}
}

// A refusal quotes the agent, the task_id or the record's key by their first 64
// bytes: a secret across that cut left its head in the rejected result, which
// the redactor no longer took for a secret.
func TestRejectionRedactsASecretAcrossTheQuotedHead(t *testing.T) {
	const secret = "s3cr3t-Value-0123456789abcdef"
	in := newIngress(redact.New(secret), nil, actors.UUIDv7{})
	pad := strings.Repeat("a", 50)
	head := secret[:64-len(pad)]
	for _, a := range []Arrival{
		{Source: SourceBus, Payload: []byte(`{"input":"x","agent":"` + pad + secret + `"}`), MessageID: "m-1", Key: "s-1"},
		{Source: SourceBus, Payload: []byte(`{"input":"x","task_id":"q-1"}`), MessageID: "m-2", Key: pad + secret + strings.Repeat("b", 60)},
		{Source: SourceBus, Payload: []byte(`{"type":"task.submitted","id":"m-3","session_id":"s-1","payload":{"input":"x","agent":"` + pad + secret + `"}}`), MessageID: "m-3"},
	} {
		_, err := in.Decode(a)
		if !errors.Is(err, ErrBadTask) {
			t.Fatalf("%s: %v; want a refusal", a.Payload, err)
		}
		r, ok := in.rejection(a, err)
		if !ok {
			t.Fatalf("%s: no rejection", a.Payload)
		}
		if strings.Contains(r.result.Error+r.result.SessionID, head) {
			t.Errorf("%s: %+v; the secret's head %q is echoed", a.Payload, r.result, head)
		}
	}
}
