package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
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
		r, why := in.rejection(a, err, recordHeaders{})
		return r, why == nil
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
		r, why := in.rejection(a, err, recordHeaders{})
		if why != nil {
			t.Fatalf("%s: no rejection", a.Payload)
		}
		if strings.Contains(r.result.Error+r.result.SessionID, head) {
			t.Errorf("%s: %+v; the secret's head %q is echoed", a.Payload, r.result, head)
		}
	}
}

// countedReads is a SQLite log that counts the events its reads return.
type countedReads struct {
	*sqlite.Log
	events atomic.Int64
}

func (l *countedReads) ReadN(ctx context.Context, session string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, session, from, n, maxBytes)
	l.events.Add(int64(len(events)))
	return events, err
}

func (l *countedReads) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, session, from)
	l.events.Add(int64(len(events)))
	return events, err
}

// sentResults is a publisher that counts what it is given.
type sentResults struct{ n atomic.Int64 }

func (p *sentResults) Publish(string, ...*message.Message) error { p.n.Add(1); return nil }
func (p *sentResults) Close() error                              { return nil }

// A refused task names a session whose log may hold a task of its task_id:
// rejectTask looked for it by reading the whole session, a page at a time, for
// every refused record, so that a stream of bad records naming a long session
// read it whole again for each. It reads at most maxRejectionPages pages, and
// publishes nothing past them (the record is poisoned, as before any result).
func TestRejectionReadsABoundedPartOfALongSession(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	const pages = 8 // maxRejectionPages
	const session, events = "big", 3 * pages * idTakenPage
	for seq := 1; seq <= events; {
		batch := make([]messages.Envelope, 0, 1000)
		for ; seq <= events && len(batch) < 1000; seq++ {
			e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x"})
			if err != nil {
				t.Fatal(err)
			}
			e.ID, e.SessionID, e.Seq, e.Actor = fmt.Sprintf("t-%d", seq), session, uint64(seq), "session"
			batch = append(batch, e)
		}
		if err := base.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	log := &countedReads{Log: base}
	pub := &sentResults{}
	n := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: log, pub: pub,
		ingress: newIngress(redact.New(), nil, actors.UUIDv7{})}
	const records = 5
	for i := range records {
		msg := message.NewMessage(fmt.Sprintf("m-%d", i), []byte(`{"input":"x","task_id":"q-1","max_steps":-1}`))
		msg.Metadata.Set(messages.MetaSessionID, session)
		a := arrivalOf(msg)
		_, refusal := n.ingress.Decode(a)
		if !errors.Is(refusal, ErrBadTask) {
			t.Fatalf("decode: %v; want a refusal", refusal)
		}
		if err := n.rejectTask(msg, a, refusal); err != nil {
			t.Fatal(err)
		}
	}
	if got, most := log.events.Load(), int64(records*pages*idTakenPage); got > most {
		t.Errorf("%d refused records of a session of %d events read %d events; want at most %d", records, events, got, most)
	}
	if got := pub.n.Load(); got != 0 {
		t.Errorf("%d results published; want none: the session was not read to its end", got)
	}
}

// corruptLog is a log whose every read of a session meets an event it cannot
// decode, as a read of a corrupt stored event does.
type corruptLog struct{ *sqlite.Log }

func (l corruptLog) ReadN(ctx context.Context, session string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	return nil, fmt.Errorf("%w: session %s seq 3: not JSON", messages.ErrCorrupt, session)
}

func (l corruptLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	return l.ReadN(ctx, session, from, 0, 0)
}

// A refused task naming a session whose log holds an event that cannot be
// decoded was handled again for ever (the read fails the same way each time),
// holding its partition, where before any result it was poisoned at once. It
// gets no result, and is poisoned.
func TestRejectionOfATaskOfACorruptSessionIsNotRetried(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	pub := &sentResults{}
	n := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: corruptLog{base}, pub: pub,
		ingress: newIngress(redact.New(), nil, actors.UUIDv7{})}
	msg := message.NewMessage("m-1", []byte(`{"input":"x","task_id":"q-1","max_steps":-1}`))
	msg.Metadata.Set(messages.MetaSessionID, "s-1")
	a := arrivalOf(msg)
	_, refusal := n.ingress.Decode(a)
	if err := n.rejectTask(msg, a, refusal); err != nil {
		t.Errorf("rejectTask: %v; want nil (no result, the record poisoned)", err)
	}
	if got := pub.n.Load(); got != 0 {
		t.Errorf("%d results published; want none", got)
	}
}
