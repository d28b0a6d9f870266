package a2a

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/troupe-run/troupe/messages"
)

// twoCalls is a Backend over one session whose task waits for the approval of
// call c1 (key k1); answered, it asks for c2 (k2); c2 answered, it completes.
// Approve waits for gate while it is set.
type twoCalls struct {
	mu       sync.Mutex
	log      []messages.Envelope
	watchers map[chan messages.Envelope]bool
	approved []string
	entered  chan string
	gate     chan struct{}
}

const bindSession = "bind"

func newTwoCalls() (*twoCalls, sdk.TaskID) {
	b := &twoCalls{watchers: map[chan messages.Envelope]bool{}, entered: make(chan string, 8)}
	envID := EnvelopeID(bindSession, "m1")
	submitted := b.envelope(&messages.TaskSubmitted{Input: "mail bob, then eve"}, 1)
	submitted.ID, submitted.CausationID, submitted.CorrelationID = envID, MessageCause("m1"), envID
	b.log = append(b.log, submitted, b.envelope(b.asks(1), 2))
	return b, TaskIDFor(bindSession, "m1")
}

func (b *twoCalls) asks(n int) *messages.ApprovalRequested {
	return &messages.ApprovalRequested{Key: fmt.Sprintf("k%d", n), CallID: fmt.Sprintf("c%d", n), Tool: "send_email", Arguments: fmt.Sprintf(`{"n":%d}`, n)}
}

func (b *twoCalls) envelope(p messages.Payload, seq uint64) messages.Envelope {
	e, err := messages.NewEnvelope(p)
	if err != nil {
		panic(err)
	}
	e.SessionID, e.Seq, e.TS = bindSession, seq, int64(1_800_000_000_000_000+seq)
	e.ID = fmt.Sprintf("%s-%d", bindSession, seq)
	e.CorrelationID = EnvelopeID(bindSession, "m1")
	return e
}

// resolve records call key answered (by whoever: the task API, a timeout) and
// what the task does next.
func (b *twoCalls) resolve(key string, approve bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := uint64(len(b.log)) + 1
	add := []messages.Envelope{b.envelope(&messages.ApprovalResolved{Key: key, Approve: approve, By: "test"}, next)}
	if key == "k1" {
		add = append(add, b.envelope(b.asks(2), next+1))
	} else {
		add = append(add, b.envelope(&messages.TaskCompleted{Output: "mailed", Steps: 2}, next+1))
	}
	b.log = append(b.log, add...)
	for w := range b.watchers {
		for _, e := range add {
			select {
			case w <- e:
			default:
			}
		}
	}
}

func (b *twoCalls) SubmitTask(context.Context, Submission) error {
	return errors.New("no new task here")
}

func (b *twoCalls) Events(_ context.Context, _ string, from uint64) ([]messages.Envelope, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []messages.Envelope
	for _, e := range b.log {
		if e.Seq >= from {
			out = append(out, e)
		}
	}
	return out, nil
}

func (b *twoCalls) Watch(string) (<-chan messages.Envelope, func()) {
	w := make(chan messages.Envelope, 64)
	b.mu.Lock()
	b.watchers[w] = true
	b.mu.Unlock()
	return w, func() {
		b.mu.Lock()
		delete(b.watchers, w)
		b.mu.Unlock()
	}
}

func (b *twoCalls) Cancel(context.Context, string, string) error { return nil }

func (b *twoCalls) Approve(ctx context.Context, _, key string, approve bool, _ string) error {
	b.entered <- key
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	b.approved = append(b.approved, key)
	b.mu.Unlock()
	b.resolve(key, approve)
	return nil
}

func (b *twoCalls) answered() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.approved, ",")
}

// sendsSeen is a RequestHandler that tells the messageId of each message/send it
// is handed.
type sendsSeen struct {
	a2asrv.RequestHandler
	seen chan string
}

func (h *sendsSeen) OnSendMessage(ctx context.Context, p *sdk.MessageSendParams) (sdk.SendMessageResult, error) {
	select {
	case h.seen <- p.Message.ID:
	default:
	}
	return h.RequestHandler.OnSendMessage(ctx, p)
}

// bindNode is Dedupe over b's task, held as this process's execution left it: in
// input-required, naming call c1.
func bindNode(t *testing.T, b *twoCalls, id sdk.TaskID) (*Dedupe, *TaskStore, *sendsSeen) {
	t.Helper()
	ctx := context.Background()
	store := NewTaskStore(b)
	exec := NewExecutor(b, "default")
	h := &sendsSeen{RequestHandler: a2asrv.NewHandler(exec, a2asrv.WithTaskStore(store)), seen: make(chan string, 16)}
	d := NewDedupe(h, exec, store)
	task, err := store.Get(ctx, id)
	if err != nil || task.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("the task: %+v, %v; want it in input-required", task, err)
	}
	if err := store.Save(ctx, task); err != nil {
		t.Fatal(err)
	}
	return d, store, h
}

func answerMessage(id sdk.TaskID, messageID string, parts ...sdk.Part) *sdk.MessageSendParams {
	m := sdk.NewMessage(sdk.MessageRoleUser, parts...)
	m.ID, m.TaskID, m.ContextID = messageID, id, bindSession
	return &sdk.MessageSendParams{Message: m}
}

// waitsForCalls reports the calls task's input-required status names.
func waitsForCalls(task *sdk.Task) string {
	if task.Status.State != sdk.TaskStateInputRequired || task.Status.Message == nil {
		return ""
	}
	list, _ := task.Status.Message.Metadata["troupe_approvals"].([]any)
	var keys []string
	for _, c := range list {
		m, _ := c.(map[string]any)
		k, _ := m["key"].(string)
		keys = append(keys, k)
	}
	return strings.Join(keys, ",")
}

// An answer sent again while the first is being taken — the same messageId (a
// client's retry) or a new one — approves the call the client was shown, once,
// and never the call the task asks for next: the second was handed to the SDK
// once the first's execution ended, the task then waiting for the next call
// (within the 3 s it is retried), and approved that call, which its client never
// saw. The same messageId answers as the first did; a new one is refused, naming
// the call that waits now; an answer sent after that approves it.
func TestDuplicateAnswerApprovesOnlyTheCallItWasSentFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, id := newTwoCalls()
	b.gate = make(chan struct{})
	d, _, h := bindNode(t, b, id)
	approve := sdk.TextPart{Text: "approve"}
	type result struct {
		res sdk.SendMessageResult
		err error
	}
	send := func(messageID string) chan result {
		c := make(chan result, 1)
		go func() {
			res, err := d.OnSendMessage(ctx, answerMessage(id, messageID, approve))
			c <- result{res, err}
		}()
		return c
	}
	first := send("a1")
	select {
	case key := <-b.entered:
		if key != "k1" {
			t.Fatalf("the first answer approves %s, want k1", key)
		}
	case <-ctx.Done():
		t.Fatal("the first answer never reached the session")
	}
	<-h.seen // a1's
	again := send("a1")
	other := send("a2")
	for seen := ""; seen != "a2"; {
		select {
		case seen = <-h.seen:
		case <-ctx.Done():
			t.Fatal("the second answer never reached the SDK")
		}
	}
	time.Sleep(50 * time.Millisecond) // the retry of a1 on its way too (if it goes to the SDK)
	close(b.gate)

	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	if task := r.res.(*sdk.Task); task.Status.State != sdk.TaskStateInputRequired || waitsForCalls(task) != "k2" {
		t.Fatalf("the first answer: %s naming %q, want input-required naming k2", task.Status.State, waitsForCalls(task))
	}
	r = <-again
	if r.err != nil {
		t.Fatalf("the same answer sent again: %v, want the first's result", r.err)
	}
	if task := r.res.(*sdk.Task); task.Status.State != sdk.TaskStateInputRequired || waitsForCalls(task) != "k2" {
		t.Fatalf("the same answer sent again: %s naming %q, want input-required naming k2", task.Status.State, waitsForCalls(task))
	}
	r = <-other
	if !errors.Is(r.err, sdk.ErrInvalidParams) || !strings.Contains(fmt.Sprint(r.err), "c2") {
		t.Fatalf("a second answer sent while the first was taken: %+v, %v; want invalid params naming call c2 that waits now", r.res, r.err)
	}
	if got := b.answered(); got != "k1" {
		t.Fatalf("approved %s, want k1 alone", got)
	}
	res, err := d.OnSendMessage(ctx, answerMessage(id, "a3", approve))
	if err != nil {
		t.Fatal(err)
	}
	if task := res.(*sdk.Task); task.Status.State != sdk.TaskStateCompleted || b.answered() != "k1,k2" {
		t.Fatalf("an answer to c2: %s, approved %s; want completed, k1 then k2", task.Status.State, b.answered())
	}
}

// An answer to a task whose input-required status this process holds names a
// call answered since by another way (POST /v1/sessions/{id}/approvals/{call},
// or its approval timed out) is refused, naming the call the task waits for
// now, and the task's status is refreshed from its session's events: it was
// taken as an answer to whichever call waited next. An answer naming its call
// ({"call": …}) answers that call alone, and is refused when it does not wait.
func TestAnswerToACallAnsweredElsewhereApprovesNothingElse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, id := newTwoCalls()
	d, store, _ := bindNode(t, b, id)
	b.resolve("k1", true) // over the task API

	_, err := d.OnSendMessage(ctx, answerMessage(id, "a1", sdk.TextPart{Text: "approve"}))
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), "c2") {
		t.Fatalf("an answer to c1, answered already: %v; want invalid params saying c1 was answered and c2 waits", err)
	}
	if got := b.answered(); got != "" {
		t.Fatalf("approved %s, want none", got)
	}
	task, err := store.Get(ctx, id)
	if err != nil || task.Status.State != sdk.TaskStateInputRequired || waitsForCalls(task) != "k2" {
		t.Fatalf("tasks/get: %+v, %v; want input-required naming k2", task, err)
	}
	_, err = d.OnSendMessage(ctx, answerMessage(id, "a2", sdk.DataPart{Data: map[string]any{"approve": true, "call": "c1"}}))
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), `"c1"`) || b.answered() != "" {
		t.Fatalf("an answer naming c1: %v, approved %q; want invalid params saying the task waits for no call c1", err, b.answered())
	}
	res, err := d.OnSendMessage(ctx, answerMessage(id, "a3", sdk.DataPart{Data: map[string]any{"approve": true, "call": "c2"}}))
	if err != nil {
		t.Fatal(err)
	}
	if task := res.(*sdk.Task); task.Status.State != sdk.TaskStateCompleted || b.answered() != "k2" {
		t.Fatalf("an answer naming c2: %s, approved %s; want completed, k2", task.Status.State, b.answered())
	}
}

// An answer that names a call the task waits for answers it through message/stream
// too, and a text answer to a task whose status is as its session tells
// approves the call it names, as before.
func TestAnswerBoundToTheShownCallStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, id := newTwoCalls()
	d, _, _ := bindNode(t, b, id)
	var last sdk.Event
	for ev, err := range d.OnSendMessageStream(ctx, answerMessage(id, "a1", sdk.DataPart{Data: map[string]any{"approve": true, "call": "c1"}})) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if st, ok := last.(*sdk.TaskStatusUpdateEvent); !ok || st.Status.State != sdk.TaskStateInputRequired || b.answered() != "k1" {
		t.Fatalf("the stream ended with %#v, approved %s; want input-required, k1", last, b.answered())
	}
	res, err := d.OnSendMessage(ctx, answerMessage(id, "a2", sdk.TextPart{Text: "yes"}))
	if err != nil {
		t.Fatal(err)
	}
	if task := res.(*sdk.Task); task.Status.State != sdk.TaskStateCompleted || b.answered() != "k1,k2" {
		t.Fatalf("then yes: %s, approved %s; want completed, k1 then k2", task.Status.State, b.answered())
	}
}

// An answer sent again with its messageId just after the node took as many
// answers as it remembers answers as the first did: the oldest answers are the
// ones forgotten. Every answer taken was forgotten at once when the 10,000th
// came, the one just taken too, and its client's retry was taken as a new
// answer: it approved the call the task asked for next (c2), which its client
// never saw.
func TestAnswerSentAgainAfterManyOthersApprovesNothingMore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, id := newTwoCalls()
	d, _, _ := bindNode(t, b, id)
	refuse := func(messageID string) {
		p := answerMessage(id, messageID, sdk.TextPart{Text: "what?"})
		rec, first := d.takeAnswer(p)
		if !first {
			t.Fatalf("answer %s taken twice", messageID)
		}
		d.answered(p, rec, sdk.ErrInvalidParams)
	}
	for i := range maxAnswers - 1 {
		refuse(fmt.Sprintf("old%d", i))
	}
	approve := sdk.TextPart{Text: "approve"}
	if _, err := d.OnSendMessage(ctx, answerMessage(id, "a1", approve)); err != nil {
		t.Fatal(err)
	}
	refuse("next") // one answer more than the node remembers
	res, err := d.OnSendMessage(ctx, answerMessage(id, "a1", approve))
	if err != nil {
		t.Fatalf("the answer sent again: %v, want the first's result", err)
	}
	if task := res.(*sdk.Task); task.Status.State != sdk.TaskStateInputRequired || waitsForCalls(task) != "k2" {
		t.Fatalf("the answer sent again: %s naming %q, want input-required naming k2", task.Status.State, waitsForCalls(task))
	}
	if got := b.answered(); got != "k1" {
		t.Fatalf("approved %s, want k1 alone", got)
	}
	d.amu.Lock()
	n := len(d.answers)
	d.amu.Unlock()
	if n > maxAnswers {
		t.Fatalf("%d answers remembered, want at most %d", n, maxAnswers)
	}
}

// An answer by message/stream whose stream is never read answers nothing, and
// the same answer sent again is taken at once: it was taken as the stream was
// asked for, and never ended, so that the retry waited for it until its client
// gave up, and the record of it was never forgotten.
func TestAnswerStreamNeverReadHoldsNoRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, id := newTwoCalls()
	d, _, _ := bindNode(t, b, id)
	approve := sdk.TextPart{Text: "approve"}
	_ = d.OnSendMessageStream(ctx, answerMessage(id, "a1", approve)) // never read
	if got := b.answered(); got != "" {
		t.Fatalf("approved %s by a stream never read, want none", got)
	}
	retry, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	res, err := d.OnSendMessage(retry, answerMessage(id, "a1", approve))
	if err != nil {
		t.Fatalf("the answer sent again: %v, want it taken", err)
	}
	if task := res.(*sdk.Task); task.Status.State != sdk.TaskStateInputRequired || waitsForCalls(task) != "k2" || b.answered() != "k1" {
		t.Fatalf("the answer sent again: %s naming %q, approved %q; want input-required naming k2, k1 approved", task.Status.State, waitsForCalls(task), b.answered())
	}
}
