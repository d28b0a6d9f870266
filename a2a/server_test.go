package a2a

import (
	"context"
	"strings"
	"sync"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

func TestParseAnswer(t *testing.T) {
	for _, c := range []struct {
		parts   []sdk.Part
		approve bool
		reason  string
		err     string
	}{
		{parts: []sdk.Part{sdk.TextPart{Text: "approve"}}, approve: true},
		{parts: []sdk.Part{sdk.TextPart{Text: "Yes, go ahead"}}, approve: true, reason: "go ahead"},
		{parts: []sdk.Part{sdk.TextPart{Text: "reject: wrong recipient"}}, reason: "wrong recipient"},
		{parts: []sdk.Part{sdk.DataPart{Data: map[string]any{"approve": false, "reason": "no"}}}, reason: "no"},
		{parts: []sdk.Part{sdk.DataPart{Data: map[string]any{"approve": "yes"}}}, err: `boolean "approve"`},
		{parts: []sdk.Part{sdk.TextPart{Text: "maybe later"}}, err: `answer "approve" or "reject"`},
	} {
		approve, reason, err := parseAnswer(sdk.NewMessage(sdk.MessageRoleUser, c.parts...))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.parts, err, c.err)
			}
			continue
		}
		if err != nil || approve != c.approve || reason != c.reason {
			t.Errorf("%v: %v %q %v, want %v %q", c.parts, approve, reason, err, c.approve, c.reason)
		}
	}
}

func TestIDsAreStableAndValidSessionIDs(t *testing.T) {
	if EnvelopeID("s", "m1") != EnvelopeID("s", "m1") || EnvelopeID("s", "m1") == EnvelopeID("s", "m2") || EnvelopeID("s1", "m1") == EnvelopeID("s2", "m1") || ContextFor("m1") == EnvelopeID("", "m1") {
		t.Fatal("IDs must be a function of the context and the message ID, one per use")
	}
	if id := ContextFor(strings.Repeat("x", 10000)); len(id) != 36 || !strings.HasPrefix(id, "a2a-") {
		t.Fatalf("context id %q", id)
	}
}

func TestTaskIDsNameTheirSessionAndEnvelope(t *testing.T) {
	id := TaskIDFor("user:alice.1", "m1")
	session, env, ok := ParseTaskID(id)
	if !ok || session != "user:alice.1" || env != EnvelopeID("user:alice.1", "m1") {
		t.Fatalf("%s: %q %q %v", id, session, env, ok)
	}
	if TaskIDFor("s", "m1") == TaskIDFor("s", "m2") || TaskIDFor("s1", "m1") == TaskIDFor("s2", "m1") {
		t.Fatal("a task ID must be one per context and message")
	}
	for _, bad := range []string{"", "~0123456789abcdef0123456789abcdef", "s~short", "0199a0b2-uuid-like", "s~0123456789abcdef0123456789abcdef0"} {
		if _, _, ok := ParseTaskID(sdk.TaskID(bad)); ok {
			t.Errorf("%q parsed as a task ID", bad)
		}
	}
}

// recordingQueue is an eventqueue.Queue that keeps what is written to it.
type recordingQueue struct {
	mu     sync.Mutex
	events []sdk.Event
}

func (q *recordingQueue) Write(_ context.Context, ev sdk.Event) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.events = append(q.events, ev)
	return nil
}

func (q *recordingQueue) written() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events)
}

func (q *recordingQueue) Read(ctx context.Context) (sdk.Event, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (q *recordingQueue) Close() error { return nil }

// takingBackend is a silentBackend that, as its session takes a task, notes how
// many events the task's client had been told of (none: a client may cancel the
// task at its first event, which must find it running), then stops the execution.
type takingBackend struct {
	silentBackend
	q       *recordingQueue
	told    int
	stopped context.CancelFunc
}

func (b *takingBackend) SubmitTask(ctx context.Context, s Submission) error {
	b.told = b.q.written()
	b.stopped()
	return b.silentBackend.SubmitTask(ctx, s)
}

// The executor reports a new task (its submitted event, the first a client gets)
// only once the task's session took it: a client that cancels the task at that
// event (the Python SDK's cancel_task at the stream's first event) finds it
// running, rather than an idle session and an internal error.
func TestExecutorReportsATaskOnceItsSessionTookIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &recordingQueue{}
	b := &takingBackend{q: q, told: -1, stopped: cancel}
	msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "think hard"})
	rc := &a2asrv.RequestContext{Message: msg, TaskID: "t", ContextID: "s"}
	_ = NewExecutor(b, "").Execute(ctx, rc, q) // ends as SubmitTask stopped it
	if b.told != 0 {
		t.Fatalf("the client was told of %d events of the task before its session took it", b.told)
	}
	if q.written() == 0 {
		t.Fatal("no event of the task")
	}
	if task, ok := q.events[0].(*sdk.Task); !ok || task.Status.State != sdk.TaskStateSubmitted {
		t.Fatalf("the first event: %#v, want the task submitted", q.events[0])
	}
}

// The word of a text answer ends at any space, not only at a blank: a reason
// on the next line ("Approve.\nThe recipient is right."), or in a text part of
// its own, as a chat client sends them, was no answer (-32602), and the call
// waited on.
func TestParseAnswerWordEndsAtAnySpace(t *testing.T) {
	for _, c := range []struct {
		parts   []sdk.Part
		approve bool
		reason  string
	}{
		{parts: []sdk.Part{sdk.TextPart{Text: "Approve.\nThe recipient is right."}}, approve: true, reason: "The recipient is right."},
		{parts: []sdk.Part{sdk.TextPart{Text: "yes\tgo ahead"}}, approve: true, reason: "go ahead"},
		{parts: []sdk.Part{sdk.TextPart{Text: "reject\r\nwrong recipient\n"}}, reason: "wrong recipient"},
		{parts: []sdk.Part{sdk.TextPart{Text: "Approve."}, sdk.TextPart{Text: "looks right"}}, approve: true, reason: "looks right"},
		{parts: []sdk.Part{sdk.TextPart{Text: "no"}, sdk.TextPart{Text: "not bob"}}, reason: "not bob"},
	} {
		approve, reason, err := parseAnswer(sdk.NewMessage(sdk.MessageRoleUser, c.parts...))
		if err != nil || approve != c.approve || reason != c.reason {
			t.Errorf("%q: %v %q %v, want %v %q", c.parts, approve, reason, err, c.approve, c.reason)
		}
	}
}
