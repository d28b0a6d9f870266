// Package a2a adapts Troupe to the Agent2Agent protocol (A2A 0.3, JSON-RPC binding)
// with the a2a-go SDK, both ways: Executor serves a node's agent (the node wires it
// in node/a2a.go: an A2A context is a Troupe session, an A2A task one Troupe task),
// and NewTool makes a remote A2A agent a tool a Troupe agent calls.
package a2a

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/troupe-run/troupe/messages"
)

// Backend is what the adapter needs of a node: to submit a task under a message ID
// that makes a retried submission the same task, to read and watch a session's
// events, to cancel its task and to answer its approvals.
type Backend interface {
	// SubmitTask submits input to agent in session sessionID as the task.submitted
	// envelope with ID envID (a session records one envelope ID once).
	SubmitTask(ctx context.Context, agent, sessionID, input, envID string) error
	// Events returns the session's events from seq from on.
	Events(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error)
	// Watch returns the session's live events (a wake-up: Events is the truth) and
	// a function that stops watching.
	Watch(sessionID string) (<-chan messages.Envelope, func())
	// Cancel stops the session's running task.
	Cancel(ctx context.Context, sessionID, reason string) error
	// Approve answers a call waiting for approval in the session.
	Approve(ctx context.Context, sessionID, call string, approve bool, reason string) error
}

// Executor runs A2A tasks as Troupe tasks of one agent (a2asrv.AgentExecutor).
type Executor struct {
	backend Backend
	agent   string
	// poll is how often the log is read again when no live event arrived.
	poll time.Duration
}

// NewExecutor returns the executor of agent ("" or "default": the node's default
// agent) on backend.
func NewExecutor(b Backend, agent string) *Executor {
	return &Executor{backend: b, agent: agent, poll: 250 * time.Millisecond}
}

var _ a2asrv.AgentExecutor = (*Executor)(nil)

// EnvelopeID is the task.submitted envelope ID of the A2A message messageID: a
// message sent again (the same messageId) is the same Troupe task, which its session
// records once.
func EnvelopeID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// ContextFor is the context (session) ID of a message that names none: derived from
// its message ID, so that a retried message/send lands in the same session.
func ContextFor(messageID string) string {
	sum := sha256.Sum256([]byte("context\x00" + messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// Execute starts the Troupe task of a new A2A task, or, for a message sent to a task
// in input-required, answers the approvals it waits for; then it follows the
// session's events until the task ends or waits for approval again.
func (e *Executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if rc.Message == nil {
		return fmt.Errorf("a2a: %w: no message", sdk.ErrInvalidParams)
	}
	session := rc.ContextID
	live, stop := e.backend.Watch(session)
	defer stop()
	var envID string
	if rc.StoredTask == nil {
		input := messageText(rc.Message)
		if strings.TrimSpace(input) == "" {
			return fmt.Errorf("a2a: %w: the message has no text part", sdk.ErrInvalidParams)
		}
		if err := q.Write(ctx, sdk.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
		envID = EnvelopeID(rc.Message.ID)
		if err := e.backend.SubmitTask(ctx, e.agent, session, input, envID); err != nil {
			return fmt.Errorf("a2a: the task was not accepted: %w", err)
		}
	} else {
		if len(rc.StoredTask.History) == 0 {
			return fmt.Errorf("a2a: task %s has no history", rc.StoredTask.ID)
		}
		envID = EnvelopeID(rc.StoredTask.History[0].ID)
		if rc.StoredTask.Status.State != sdk.TaskStateInputRequired {
			return fmt.Errorf("a2a: %w: task %s is %s; only a task in input-required takes another message", sdk.ErrInvalidParams, rc.StoredTask.ID, rc.StoredTask.Status.State)
		}
		if err := e.answer(ctx, rc, session, envID); err != nil {
			return err
		}
	}
	if err := q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, nil)); err != nil {
		return err
	}
	return e.follow(ctx, rc, q, session, envID, live)
}

// taskRun is what a Troupe task's events say so far.
type taskRun struct {
	started bool
	last    uint64
	// pending are the approval.requested of calls not answered yet, by key.
	pending map[string]*messages.ApprovalRequested
	order   []string
	done    *messages.Envelope
}

// scan reads the task's events after the task.submitted with envID.
func (r *taskRun) scan(events []messages.Envelope, envID string, each func(messages.Envelope) error) error {
	for _, ev := range events {
		if ev.Seq <= r.last {
			continue
		}
		r.last = ev.Seq
		if !r.started {
			r.started = ev.Type == messages.TypeTaskSubmitted && ev.ID == envID
			continue
		}
		if r.done != nil {
			continue
		}
		p, err := ev.Decode()
		if err != nil {
			continue
		}
		switch v := p.(type) {
		case *messages.ApprovalRequested:
			if r.pending[v.Key] == nil {
				r.order = append(r.order, v.Key)
			}
			r.pending[v.Key] = v
		case *messages.ApprovalResolved:
			delete(r.pending, v.Key)
		case *messages.TaskCompleted, *messages.TaskFailed:
			ev := ev
			r.done = &ev
		}
		if each != nil {
			if err := each(ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// waiting returns the calls that wait for approval, oldest first.
func (r *taskRun) waiting() []*messages.ApprovalRequested {
	var out []*messages.ApprovalRequested
	for _, k := range r.order {
		if a := r.pending[k]; a != nil {
			out = append(out, a)
		}
	}
	return out
}

// follow turns the task's events into A2A events until it ends (completed, failed,
// canceled) or waits for approval (input-required).
func (e *Executor) follow(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, session, envID string, live <-chan messages.Envelope) error {
	run := &taskRun{pending: map[string]*messages.ApprovalRequested{}}
	// A task answered after input-required replays its events up to now silently
	// (they were reported); a new task reports every event after its start.
	first := rc.StoredTask != nil
	tick := time.NewTicker(e.poll)
	defer tick.Stop()
	for {
		events, err := e.backend.Events(ctx, session, run.last+1)
		if err != nil {
			return fmt.Errorf("a2a: session %s: %w", session, err)
		}
		report := func(ev messages.Envelope) error {
			if first || ev.Type != messages.TypeToolCallRequested {
				return nil
			}
			p, err := ev.Decode()
			if err != nil {
				return nil
			}
			tc := p.(*messages.ToolCallRequested)
			msg := sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: "calling tool " + tc.Tool})
			return q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, msg))
		}
		if err := run.scan(events, envID, report); err != nil {
			return err
		}
		first = false
		if run.done != nil {
			return e.finish(ctx, rc, q, *run.done)
		}
		if w := run.waiting(); run.started && len(w) > 0 {
			ev := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateInputRequired, approvalMessage(rc, w))
			ev.Final = true
			return q.Write(ctx, ev)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-live:
			if !ok {
				live = nil
			}
		case <-tick.C:
		}
	}
}

// finish reports a task's end: the answer as an artifact and the completed status
// with the answer as its message, or the failed (canceled) status with the error.
func (e *Executor) finish(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, ev messages.Envelope) error {
	p, err := ev.Decode()
	if err != nil {
		return err
	}
	switch v := p.(type) {
	case *messages.TaskCompleted:
		art := sdk.NewArtifactEvent(rc, sdk.TextPart{Text: v.Output})
		art.Artifact.Name = "answer"
		art.LastChunk = true
		if err := q.Write(ctx, art); err != nil {
			return err
		}
		st := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCompleted, sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: v.Output}))
		st.Final = true
		return q.Write(ctx, st)
	case *messages.TaskFailed:
		state := sdk.TaskStateFailed
		if v.Reason == messages.ReasonCancelled {
			state = sdk.TaskStateCanceled
		}
		text := fmt.Sprintf("%s: %s", v.Reason, v.Error)
		st := sdk.NewStatusUpdateEvent(rc, state, sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: text}))
		st.Final = true
		return q.Write(ctx, st)
	}
	return fmt.Errorf("a2a: unexpected end event %s", ev.Type)
}

// approvalMessage says which calls wait and how to answer.
func approvalMessage(rc *a2asrv.RequestContext, w []*messages.ApprovalRequested) *sdk.Message {
	var b strings.Builder
	for _, a := range w {
		fmt.Fprintf(&b, "The agent wants to call %s with %s (call %s): it needs approval.\n", a.Tool, a.Arguments, a.CallID)
	}
	b.WriteString(`Reply to this task with "approve" or "reject" (a reason may follow), or a data part {"approve": true|false, "reason": "..."}.`)
	msg := sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: b.String()})
	calls := make([]any, len(w))
	for i, a := range w {
		calls[i] = map[string]any{"call": a.CallID, "key": a.Key, "tool": a.Tool, "arguments": a.Arguments}
	}
	msg.Metadata = map[string]any{"troupe_approvals": calls}
	return msg
}

// answer applies a message sent to a task in input-required: an approval answer
// for every call that waits.
func (e *Executor) answer(ctx context.Context, rc *a2asrv.RequestContext, session, envID string) error {
	approve, reason, err := parseAnswer(rc.Message)
	if err != nil {
		return fmt.Errorf("a2a: %w: %v", sdk.ErrInvalidParams, err)
	}
	events, err := e.backend.Events(ctx, session, 1)
	if err != nil {
		return fmt.Errorf("a2a: session %s: %w", session, err)
	}
	run := &taskRun{pending: map[string]*messages.ApprovalRequested{}}
	if err := run.scan(events, envID, nil); err != nil {
		return err
	}
	var errs []error
	for _, a := range run.waiting() {
		if err := e.backend.Approve(ctx, session, a.Key, approve, reason); err != nil {
			errs = append(errs, fmt.Errorf("call %s: %w", a.CallID, err))
		}
	}
	return errors.Join(errs...)
}

// parseAnswer reads an approval answer: a data part {"approve", "reason"}, or text
// starting with approve/approved/yes/ok or reject/rejected/deny/no.
func parseAnswer(m *sdk.Message) (approve bool, reason string, err error) {
	for _, p := range m.Parts {
		if d, ok := p.(sdk.DataPart); ok {
			a, ok := d.Data["approve"].(bool)
			if !ok {
				return false, "", errors.New(`the data part has no boolean "approve"`)
			}
			r, _ := d.Data["reason"].(string)
			return a, r, nil
		}
	}
	text := strings.TrimSpace(messageText(m))
	word, rest, _ := strings.Cut(text, " ")
	switch strings.ToLower(strings.Trim(word, ".,:;!")) {
	case "approve", "approved", "yes", "ok", "y":
		return true, strings.TrimSpace(rest), nil
	case "reject", "rejected", "deny", "denied", "no", "n":
		return false, strings.TrimSpace(rest), nil
	}
	return false, "", fmt.Errorf(`the task waits for approval: answer "approve" or "reject" (a reason may follow), not %q`, truncate(text, 80))
}

// Cancel cancels the session's running task and reports the task canceled.
func (e *Executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if err := e.backend.Cancel(ctx, rc.ContextID, "a2a tasks/cancel"); err != nil {
		return fmt.Errorf("a2a: cancel session %s: %w", rc.ContextID, err)
	}
	st := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCanceled, nil)
	st.Final = true
	err := q.Write(ctx, st)
	if errors.Is(err, eventqueue.ErrQueueClosed) {
		// The running execution saw the session's task fail as cancelled and
		// reported the task canceled first.
		return nil
	}
	return err
}

// messageText joins the text parts of a message (and data parts as JSON).
func messageText(m *sdk.Message) string {
	var parts []string
	for _, p := range m.Parts {
		switch v := p.(type) {
		case sdk.TextPart:
			parts = append(parts, v.Text)
		case sdk.DataPart:
			b, err := json.Marshal(v.Data)
			if err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	return strings.Join(parts, "\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Dedupe is an a2asrv.RequestHandler that makes message/send and message/stream
// idempotent by messageId: a message that names no context gets one derived from
// its messageId (ContextFor), and a message seen before (on this process) answers
// with the task it started instead of starting another. Across restarts the Troupe
// session still records the task once (EnvelopeID).
type Dedupe struct {
	a2asrv.RequestHandler
	mu    sync.Mutex
	tasks map[string]sdk.TaskID
}

var _ a2asrv.RequestHandler = (*Dedupe)(nil)

// NewDedupe wraps h.
func NewDedupe(h a2asrv.RequestHandler) *Dedupe {
	return &Dedupe{RequestHandler: h, tasks: map[string]sdk.TaskID{}}
}

// seen returns the task a message started before, and records id's task.
func (d *Dedupe) prepare(p *sdk.MessageSendParams) (sdk.TaskID, bool) {
	if p == nil || p.Message == nil || p.Message.ID == "" {
		return "", false
	}
	if p.Message.ContextID == "" && p.Message.TaskID == "" {
		p.Message.ContextID = ContextFor(p.Message.ID)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.tasks[p.Message.ID]
	return id, ok
}

func (d *Dedupe) remember(msgID string, id sdk.TaskID) {
	if msgID == "" || id == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.tasks) > 100000 {
		clear(d.tasks)
	}
	d.tasks[msgID] = id
}

// OnSendMessage implements a2asrv.RequestHandler.
func (d *Dedupe) OnSendMessage(ctx context.Context, p *sdk.MessageSendParams) (sdk.SendMessageResult, error) {
	if id, ok := d.prepare(p); ok {
		return d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
	}
	res, err := d.RequestHandler.OnSendMessage(ctx, p)
	if t, ok := res.(*sdk.Task); ok && err == nil {
		d.remember(p.Message.ID, t.ID)
	}
	return res, err
}

// OnSendMessageStream implements a2asrv.RequestHandler: a message seen before
// resubscribes to its task while it runs, else yields the task as it is.
func (d *Dedupe) OnSendMessageStream(ctx context.Context, p *sdk.MessageSendParams) iter.Seq2[sdk.Event, error] {
	if id, ok := d.prepare(p); ok {
		return func(yield func(sdk.Event, error) bool) {
			t, err := d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
			if err != nil || t.Status.State.Terminal() || t.Status.State == sdk.TaskStateInputRequired {
				yield(t, err)
				return
			}
			for ev, err := range d.RequestHandler.OnResubscribeToTask(ctx, &sdk.TaskIDParams{ID: id}) {
				if !yield(ev, err) {
					return
				}
			}
		}
	}
	return func(yield func(sdk.Event, error) bool) {
		for ev, err := range d.RequestHandler.OnSendMessageStream(ctx, p) {
			if ev != nil && p != nil && p.Message != nil {
				d.remember(p.Message.ID, ev.TaskInfo().TaskID)
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}
