package node

import (
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// A task read from the bus reaches its session as the ingress decoded it, beside
// its envelope, which the log records: with a secret that is not valid UTF-8,
// redaction split a character of the input, and the session ran on a byte the
// envelope (JSON) holds as U+FFFD. Both say the same text.
func TestRedactedTaskIsTheTaskItsEnvelopeHolds(t *testing.T) {
	in := newIngress(redact.New("\xa9abcdefgh"), actors.SystemClock{}, actors.UUIDv7{})
	env, task, _, err := in.decode(Arrival{Source: SourceBus, MessageID: "m1", Key: "s1", Payload: []byte(`{"input":"xéabcdefgh y"}`)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Decode()
	if err != nil {
		t.Fatal(err)
	}
	logged, ok := p.(*messages.TaskSubmitted)
	if !ok {
		t.Fatalf("the envelope holds a %T", p)
	}
	if logged.Input != task.Input {
		t.Fatalf("the envelope holds input %q, the session runs %q", logged.Input, task.Input)
	}
}
