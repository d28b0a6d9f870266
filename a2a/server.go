// Package a2a adapts Troupe to the Agent2Agent protocol (A2A 0.3, JSON-RPC binding,
// and 1.0's methods translated to it: v1.go) with the a2a-go SDK, both ways:
// Executor serves a node's agent (the node wires it in node/a2a.go: an A2A context
// is a Troupe session, an A2A task one Troupe task, its state the session's events:
// TaskStore), and NewTool makes a remote A2A agent a tool a Troupe agent calls.
package a2a

import (
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"mime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/troupe-run/troupe/messages"
)

// Backend is what the adapter needs of a node: to submit a task under a message ID
// that makes a retried submission the same task, to read and watch a session's
// events, to cancel its task and to answer its approvals.
type Backend interface {
	// SubmitTask submits s's task as the task.submitted envelope with ID
	// s.EnvelopeID (a session records one envelope ID once), caused by
	// s.MessageID (its CausationID is MessageCause's).
	SubmitTask(ctx context.Context, s Submission) error
	// Events returns the session's events from seq from on.
	Events(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error)
	// Watch returns the session's live events (a wake-up: Events is the truth),
	// with the increments of its model answers between them as they stream
	// (messages.TypeModelDelta envelopes, best effort: Node.WatchDeltas), and a
	// function that stops watching.
	Watch(sessionID string) (<-chan messages.Envelope, func())
	// Cancel stops the session's running task.
	Cancel(ctx context.Context, sessionID, reason string) error
	// Approve answers a call waiting for approval in the session.
	Approve(ctx context.Context, sessionID, call string, approve bool, reason string) error
}

// TaskChecker is a Backend that tells, before any task is made, whether
// SubmitTask would refuse a task (its input too long, its session ID not one):
// such a message is answered with InvalidParams (-32602) and the reason, not with
// a task that fails and says no more.
type TaskChecker interface {
	CheckTask(s Submission) error
}

// AnswerChecker is a Backend that tells, before an answer to a task in
// input-required is taken, whether Approve would refuse its reason (too long, not
// UTF-8): such a message is answered with InvalidParams (-32602) and the reason,
// and the task still waits for an answer.
type AnswerChecker interface {
	CheckAnswerReason(reason string) error
}

// RunningTasks is a Backend that tells which task a session runs now without
// reading its whole history (the node: from its kept fold of the session): the
// task.submitted envelope ID RunningTask tells from the session's events, ""
// when none runs (or there is no such session). Cancel asks it, when it can, at
// each tasks/cancel.
type RunningTasks interface {
	RunningTask(ctx context.Context, session string) (string, error)
}

// TaskCanceler is a Backend that cancels one task of a session by its
// task.submitted envelope ID, whether it runs or waits its turn behind another
// task of the session, and never another task: Cancel asks it, when it can, at
// each tasks/cancel. It returns nil once the task ended cancelled; an error
// wrapping ErrTaskNotRunning when the task neither runs nor waits (it ended, it
// ended otherwise before the cancellation reached it, or the session cannot end
// it while it waits); one wrapping ErrCancelUnconfirmed when it sent the
// cancellation but cannot tell yet what became of the task.
type TaskCanceler interface {
	CancelTask(ctx context.Context, sessionID, envelopeID, reason string) error
}

// ErrTaskNotRunning is what a TaskCanceler's error wraps when the task it was to
// cancel neither runs nor waits its turn.
var ErrTaskNotRunning = errors.New("a2a: the task neither runs nor waits its turn")

// ErrCancelUnconfirmed is what a TaskCanceler's error wraps when it sent the
// cancellation but cannot tell yet what became of the task (its end is not
// recorded yet): tasks/cancel answers an internal error saying so, never the
// task canceled, and tasks/get tells the task's end.
var ErrCancelUnconfirmed = errors.New("a2a: the cancellation was sent; the task's end is not known yet")

// Submission is the Troupe task an A2A message starts.
type Submission struct {
	Agent     string // the executor's agent ("default": the node's default)
	SessionID string // the message's contextId
	Input     string // the text of its parts
	// MessageID is the client's messageId, and EnvelopeID the ID of the task's
	// task.submitted envelope, EnvelopeID(SessionID, MessageID).
	MessageID, EnvelopeID string
	// Budget is what the message's metadata asks (MessageBudget).
	Budget Budget
}

// Budget is a task's budget as a message's metadata gives it (the keys of a task
// POSTed to /v1/tasks: "max_tokens", "max_cost_usd", "max_steps", "deadline_ms");
// 0 means the agent's (no deadline).
type Budget struct {
	MaxTokens  int
	MaxCostUSD float64
	MaxSteps   int
	// DeadlineMS is the task's deadline in milliseconds from its submission: a
	// task queued behind its context's running one fails at it while it waits.
	DeadlineMS int64
}

// MessageBudget reads the budget of the task message m starts from its metadata:
// "max_tokens", "max_steps" and "deadline_ms" are whole numbers, "max_cost_usd" a number; any
// other type is an error that wraps sdk.ErrInvalidParams (the Backend checks the
// ranges: TaskChecker).
func MessageBudget(m *sdk.Message) (Budget, error) {
	var b Budget
	whole := func(key string, dst *int) error {
		v, ok := m.Metadata[key]
		if !ok || v == nil {
			return nil
		}
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) || f > 1<<53 || f < -(1<<53) {
			return fmt.Errorf("a2a: %w: message.metadata.%s must be a whole number, got %s", sdk.ErrInvalidParams, key, jsonText(v))
		}
		*dst = int(f)
		return nil
	}
	if err := whole("max_tokens", &b.MaxTokens); err != nil {
		return b, err
	}
	if err := whole("max_steps", &b.MaxSteps); err != nil {
		return b, err
	}
	var deadline int
	if err := whole("deadline_ms", &deadline); err != nil {
		return b, err
	}
	b.DeadlineMS = int64(deadline)
	if v, ok := m.Metadata["max_cost_usd"]; ok && v != nil {
		f, ok := v.(float64)
		if !ok {
			return b, fmt.Errorf("a2a: %w: message.metadata.max_cost_usd must be a number of US dollars, got %s", sdk.ErrInvalidParams, jsonText(v))
		}
		b.MaxCostUSD = f
	}
	return b, nil
}

// jsonText is v as JSON, cut at 64 bytes.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	return truncate(string(b), 64)
}

// messageCausePrefix starts MessageCause's IDs.
const messageCausePrefix = "a2a-message:"

// MessageCause is the CausationID of the task.submitted envelope of a task that
// A2A message messageID started: the session's events keep the client's
// messageId, which a task rebuilt from them shows as its first message's.
func MessageCause(messageID string) string { return messageCausePrefix + messageID }

// submission is the Submission of message m to e's agent in session.
func (e *Executor) submission(m *sdk.Message, session string) (Submission, error) {
	b, err := MessageBudget(m)
	if err != nil {
		return Submission{}, err
	}
	return Submission{Agent: e.agent, SessionID: session, Input: messageText(m), MessageID: m.ID, EnvelopeID: EnvelopeID(session, m.ID), Budget: b}, nil
}

// Executor runs A2A tasks as Troupe tasks of one agent (a2asrv.AgentExecutor).
type Executor struct {
	backend Backend
	agent   string
	// poll is the first wait before watching a session again whose watch ended at
	// once (follow), and the most between reads of a log behind the live events.
	poll time.Duration
	// tasks, when set (NewDedupe), tell where the reads of a task's session
	// found its task.submitted (TaskStore.submittedSeq): an answer to a task in
	// input-required reads its session from there on (answer).
	tasks *TaskStore
	// refused holds, by task ID, why the session refused a task Dedupe claimed
	// before its execution (sdk.TaskID → error): the SDK answers the execution's
	// error of a stored task with the task, failed, and no reason, and Dedupe
	// answers the reason instead (refusal).
	refused sync.Map
	// bound holds, by boundKey, the calls (call ID by key) an answer to a task in
	// input-required was bound to as it came (Dedupe.checkAnswer), which its
	// execution answers, if they still wait, and no other.
	bound sync.Map
}

// refusal takes the reason the session refused task id, if it did.
func (e *Executor) refusal(id sdk.TaskID) (error, bool) {
	err, ok := e.refused.LoadAndDelete(id)
	if !ok {
		return nil, false
	}
	return err.(error), true
}

// NewExecutor returns the executor of agent ("" or "default": the node's default
// agent) on backend.
func NewExecutor(b Backend, agent string) *Executor {
	return &Executor{backend: b, agent: agent, poll: 250 * time.Millisecond}
}

var _ a2asrv.AgentExecutor = (*Executor)(nil)

// EnvelopeID is the task.submitted envelope ID of the A2A message messageID in
// context (session) contextID: a message sent again (the same messageId) is the
// same Troupe task, which its session records once. The context is part of it:
// a messageId is unique to its client only (clients number their messages "1",
// "2", …), and an envelope ID is the log's, across sessions, so the same
// messageId in another context is another task.
func EnvelopeID(contextID, messageID string) string {
	sum := sha256.Sum256([]byte(contextID + "\x00" + messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// legacyEnvelopeID is the task.submitted envelope ID the builds before
// EnvelopeID took the context gave message messageID's task: derived from the
// messageId alone. Those tasks keep it (their task IDs name it: ParseTaskID), and
// a message sent again after the change finds its task under it (Dedupe.legacy).
func legacyEnvelopeID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// EventFinder is a Backend that finds an event of a session by its ID without
// reading the session (the node: eventlog.FindEvent): Dedupe asks it, when it
// can, whether a message's task was recorded under its legacy envelope ID; else
// it reads the session (TaskStore.Get).
type EventFinder interface {
	// FindEvent returns the event of session whose ID is id, and true; false
	// and no error when the session has no such event.
	FindEvent(ctx context.Context, session, id string) (messages.Envelope, bool, error)
}

// ContextFor is the context (session) ID of a message that names none: derived from
// its message ID, so that a retried message/send lands in the same session.
func ContextFor(messageID string) string {
	sum := sha256.Sum256([]byte("context\x00" + messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// check reports why a message that starts a task would not start one (the
// error wraps sdk.ErrInvalidParams), if it would not.
func (e *Executor) check(m *sdk.Message) error {
	if err := checkFiles(m); err != nil {
		return err
	}
	input := messageText(m)
	if strings.TrimSpace(input) == "" {
		return fmt.Errorf("a2a: %w: the message has no text part", sdk.ErrInvalidParams)
	}
	sub, err := e.submission(m, m.ContextID)
	if err != nil {
		return err
	}
	if c, ok := e.backend.(TaskChecker); ok {
		if err := c.CheckTask(sub); err != nil {
			return fmt.Errorf("a2a: %w: %w", sdk.ErrInvalidParams, err)
		}
	}
	return nil
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
	var from uint64 // the seq of the task's task.submitted, when known
	claimed := false
	if rc.StoredTask != nil {
		claimed, _ = rc.StoredTask.Metadata[ClaimKey].(bool)
	}
	resumed := rc.StoredTask != nil && !claimed
	if !resumed {
		if err := e.check(rc.Message); err != nil {
			return err
		}
		// The session takes the task before the client hears of it: a client may
		// act on the task at its first event (tasks/cancel), and must find it
		// running. A task the session refuses was never one: the client gets the
		// error, and the message may be sent again (Dedupe releases its claim).
		sub, err := e.submission(rc.Message, session)
		if err != nil {
			return err
		}
		envID = sub.EnvelopeID
		if err := e.backend.SubmitTask(ctx, sub); err != nil {
			err = fmt.Errorf("%w: the session did not take the task: %w (nothing was recorded: send the message again, with the same messageId, later)", sdk.ErrInternalError, err)
			if claimed {
				e.refused.Store(rc.TaskID, err)
			}
			return err
		}
		if err := q.Write(ctx, sdk.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	} else {
		if _, id, ok := ParseTaskID(rc.StoredTask.ID); ok {
			envID = id
		} else if len(rc.StoredTask.History) > 0 {
			envID = EnvelopeID(rc.StoredTask.ContextID, rc.StoredTask.History[0].ID)
		} else {
			return fmt.Errorf("a2a: task %s has no history", rc.StoredTask.ID)
		}
		if rc.StoredTask.Status.State != sdk.TaskStateInputRequired {
			return fmt.Errorf("a2a: %w: task %s is %s; only a task in input-required takes another message", sdk.ErrInvalidParams, rc.StoredTask.ID, rc.StoredTask.Status.State)
		}
		submitted, err := e.answer(ctx, rc, session, envID)
		if err != nil {
			return err
		}
		from = submitted
	}
	if err := q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, nil)); err != nil {
		return err
	}
	// The events before the task's task.submitted say nothing of it (taskRun.scan).
	run := newTaskRun()
	run.last = max(from, 1) - 1
	return e.follow(ctx, rc, q, session, envID, live, run, followMode{silent: resumed})
}

// taskRun is what a Troupe task's events say so far.
type taskRun struct {
	started bool
	// task is the task's correlation ID (its task.submitted's), which the events
	// the session records for it carry.
	task string
	last uint64
	// pending are the approval.requested of calls not answered yet, by key.
	pending map[string]*messages.ApprovalRequested
	order   []string
	done    *messages.Envelope
	// calls are the task's model calls whose text is the agent's answer (steps of
	// its loop: no purpose, no ReAct protocol), whose deltas stream into the answer
	// artifact; answered are the calls whose model.responded was read, whose
	// deltas still in flight are stale.
	calls    map[string]bool
	answered map[string]bool
}

func newTaskRun() *taskRun {
	return &taskRun{pending: map[string]*messages.ApprovalRequested{}, calls: map[string]bool{}, answered: map[string]bool{}}
}

// scan reads the task's events after the task.submitted with envID. Another
// task's events are not the task's: a task sent to a session whose task runs is
// recorded at once and runs after it, so the running task's answer and end come
// after its task.submitted.
func (r *taskRun) scan(events []messages.Envelope, envID string, each func(messages.Envelope, messages.Payload) error) error {
	for _, ev := range events {
		if ev.Seq <= r.last {
			continue
		}
		r.last = ev.Seq
		if !r.started {
			if ev.Type == messages.TypeTaskSubmitted && ev.ID == envID {
				r.started, r.task = true, cmp.Or(ev.CorrelationID, ev.ID)
			}
			continue
		}
		if r.done != nil || (ev.CorrelationID != "" && ev.CorrelationID != r.task) {
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
		case *messages.ModelRequested:
			if v.Purpose == "" && v.Protocol == "" {
				r.calls[v.Key] = true
			}
		case *messages.ModelResponded:
			r.answered[v.Key] = true
		case *messages.TaskCompleted, *messages.TaskFailed:
			ev := ev
			r.done = &ev
		}
		if each != nil {
			if err := each(ev, p); err != nil {
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

// waitingKeys names the calls of w (run.waiting's), in order.
func waitingKeys(w []*messages.ApprovalRequested) string {
	keys := make([]string, len(w))
	for i, a := range w {
		keys[i] = a.Key
	}
	return strings.Join(keys, "\x00")
}

// AnswerArtifact is the name of the artifact that holds a task's answer.
const AnswerArtifact = "answer"

// PartialKey is the artifact metadata key set (true) on the artifact events that
// start streamed text: until an event without it replaces the artifact, it holds
// model deltas, not a recorded answer. Push notifications are not sent for a task
// in that state (one per token would flood the webhook).
const PartialKey = "troupe_partial"

// answerStream streams a task's model answers into its answer artifact (one per
// task, its ID derived from the task's): a call's first delta, and a delta with
// Reset (a retried attempt: the text before it belongs to no answer), replace the
// artifact; its other deltas append to it; the call's model.responded replaces it
// with the answer recorded, whole, whatever deltas were missed; the task's end
// replaces it with the task's answer (the last chunk), or with nothing when the
// task failed.
type answerStream struct {
	id      sdk.ArtifactID
	key     string // the call whose text the artifact shows
	partial bool   // the artifact holds deltas of key its model.responded did not replace yet
	written bool   // the artifact exists
}

func newAnswerStream(rc *a2asrv.RequestContext) *answerStream {
	st := &answerStream{id: sdk.ArtifactID(AnswerArtifact + "-" + string(rc.TaskID))}
	if rc.StoredTask != nil {
		for _, a := range rc.StoredTask.Artifacts {
			st.written = st.written || a.ID == st.id
		}
	}
	return st
}

// event is the artifact event that appends text to the answer artifact, or
// replaces it with text; partial marks the start of streamed text.
func (st *answerStream) event(rc *a2asrv.RequestContext, text string, appendTo, partial, last bool) *sdk.TaskArtifactUpdateEvent {
	ev := sdk.NewArtifactUpdateEvent(rc, st.id, sdk.TextPart{Text: text})
	ev.Append, ev.LastChunk = appendTo, last
	ev.Artifact.Name = AnswerArtifact
	if partial && !appendTo {
		ev.Artifact.Metadata = map[string]any{PartialKey: true}
	}
	st.written = true
	return ev
}

// delta streams a model delta of the task's into the answer artifact; deltas of
// other calls (another task's, a plan's, a call already answered) and tool-call
// increments are not the answer's text.
func (st *answerStream) delta(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Writer, run *taskRun, env messages.Envelope) error {
	p, err := env.Decode()
	if err != nil {
		return nil
	}
	d, ok := p.(*messages.ModelDelta)
	if !ok || !run.calls[d.Key] || run.answered[d.Key] || (d.Content == "" && !d.Reset) {
		return nil
	}
	appendTo := st.partial && st.key == d.Key && !d.Reset
	st.key, st.partial = d.Key, true
	return q.Write(ctx, st.event(rc, d.Content, appendTo, true, false))
}

// answered replaces streamed text with the call's recorded answer.
func (st *answerStream) answered(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Writer, v *messages.ModelResponded) error {
	if !st.partial || st.key != v.Key {
		return nil
	}
	st.partial = false
	return q.Write(ctx, st.event(rc, v.Message.Content, false, false, false))
}

// followMode says how follow starts and where it stops.
type followMode struct {
	// silent: the log's events up to now were reported (a task answered after
	// input-required): the first read of the log reports none of them.
	silent bool
	// throughInput: a task that waits for approval is reported input-required and
	// followed on (approved, it works again) to its end, as A2A 1.0's
	// SubscribeToTask streams; else its input-required status is final.
	throughInput bool
	// asked are the keys of the calls the subscriber knows wait for approval
	// (waitingKeys), "" none.
	asked string
}

// follow turns the task's events after those run read into A2A events until it
// ends (completed, failed, canceled) or waits for approval (input-required, unless
// mode.throughInput), and its model deltas into increments of its answer artifact
// as they come.
func (e *Executor) follow(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Writer, session, envID string, live <-chan messages.Envelope, run *taskRun, mode followMode) error {
	st := newAnswerStream(rc)
	// A task answered after input-required replays its events up to now silently
	// (they were reported); a new task reports every event after its start; a
	// subscription, every event after those run read.
	first := mode.silent
	asked := mode.asked
	// The live events come in order, the deltas of a call between its
	// model.requested and its model.responded: the log is read up to the live event
	// that woke the loop (limit), not past it, so that the deltas behind it are
	// streamed before the answer that ends them is read. A new task's events all
	// come live (the watch began before the submission), so its log is read at the
	// first of them. While nothing happens (a model call without deltas, an
	// approval nobody gave yet) the log is not read: every event the task records
	// comes live. When the live events stop (the watcher fell behind, the session
	// moved to another node, the node closes), the loop watches again and reads the
	// log to its end; a watch that ends again before any event came is retried after
	// e.poll, then less and less often (the node may be closing). A log that has not
	// caught up with the live event that woke the loop is read again soon.
	limit := uint64(0)
	read := mode.silent || run.started
	var rewatch, retry time.Duration // the wait before the next watch, the next read of a log behind
	heard := true                    // an event came since the last watch began
	var timer *time.Timer
	stopLive := func() {} // the caller stops the first watch
	defer func() {
		stopLive()
		if timer != nil {
			timer.Stop()
		}
	}()
	after := func(d time.Duration) <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		return timer.C
	}
	for {
		if read {
			events, err := e.backend.Events(ctx, session, run.last+1)
			if err != nil {
				return fmt.Errorf("a2a: session %s: %w", session, err)
			}
			if limit > 0 {
				for i, ev := range events {
					if ev.Seq > limit {
						events = events[:i]
						break
					}
				}
			}
			report := func(ev messages.Envelope, p messages.Payload) error {
				if first {
					return nil
				}
				switch v := p.(type) {
				case *messages.ModelResponded:
					return st.answered(ctx, rc, q, v)
				case *messages.ToolCallRequested:
					msg := sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: "calling tool " + v.Tool})
					return q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, msg))
				}
				return nil
			}
			if err := run.scan(events, envID, report); err != nil {
				return err
			}
			first = false
			if run.done != nil {
				return e.finish(ctx, rc, q, st, *run.done)
			}
			switch w := run.waiting(); {
			case run.started && len(w) > 0 && !mode.throughInput:
				ev := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateInputRequired, approvalMessage(rc, w))
				ev.Final = true
				return q.Write(ctx, ev)
			case run.started && len(w) > 0 && waitingKeys(w) != asked:
				asked = waitingKeys(w)
				if err := q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateInputRequired, approvalMessage(rc, w))); err != nil {
					return err
				}
			case len(w) == 0 && asked != "":
				// Answered (by this subscriber's client or any other): it works again.
				asked = ""
				if err := q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, nil)); err != nil {
					return err
				}
			}
		}
		read = true
		behind := limit > 0 && run.last < limit
		switch {
		case !behind:
			retry = 0
		case retry == 0:
			retry = e.poll / 8
		default:
			retry = min(2*retry, e.poll)
		}
		// Wait for an event (then read the log up to it); stream the deltas that
		// come meanwhile.
	wait:
		for {
			var again <-chan time.Time
			switch {
			case live == nil:
				again = after(rewatch)
			case behind:
				again = after(retry)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case env, ok := <-live:
				if !ok {
					live, limit = nil, 0
					switch {
					case heard:
						rewatch = 0
					case rewatch == 0:
						rewatch = e.poll
					default:
						rewatch = min(2*rewatch, 16*e.poll)
					}
					continue
				}
				heard = true
				if env.Type != messages.TypeModelDelta {
					limit = max(limit, env.Seq)
					break wait
				}
				if err := st.delta(ctx, rc, q, run, env); err != nil {
					return err
				}
			case <-again:
				if live == nil {
					// Watched again before the log is read: nothing between falls
					// through.
					stopLive()
					live, stopLive = e.backend.Watch(session)
					heard = false
				}
				break wait
			}
		}
	}
}

// finish reports a task's end: the answer as the answer artifact's last chunk and
// the completed status with the answer as its message, or the failed (canceled)
// status with the error (and an emptied answer artifact when text was streamed).
func (e *Executor) finish(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Writer, st *answerStream, ev messages.Envelope) error {
	p, err := ev.Decode()
	if err != nil {
		return err
	}
	switch v := p.(type) {
	case *messages.TaskCompleted:
		if err := q.Write(ctx, st.event(rc, v.Output, false, false, true)); err != nil {
			return err
		}
		end := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCompleted, sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: v.Output}))
		end.Final = true
		return q.Write(ctx, end)
	case *messages.TaskFailed:
		if st.written {
			if err := q.Write(ctx, st.event(rc, "", false, false, true)); err != nil {
				return err
			}
		}
		state := sdk.TaskStateFailed
		if v.Reason == messages.ReasonCancelled {
			state = sdk.TaskStateCanceled
		}
		text := fmt.Sprintf("%s: %s", v.Reason, v.Error)
		end := sdk.NewStatusUpdateEvent(rc, state, sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: text}))
		end.Final = true
		return q.Write(ctx, end)
	}
	return fmt.Errorf("a2a: unexpected end event %s", ev.Type)
}

// approvalsKey is the metadata key of an input-required status message that
// lists the calls waiting for approval: each a call ID ("call"), a key, a tool
// and its arguments.
const approvalsKey = "troupe_approvals"

// approvalMessage says which calls wait and how to answer.
func approvalMessage(rc sdk.TaskInfoProvider, w []*messages.ApprovalRequested) *sdk.Message {
	var b strings.Builder
	for _, a := range w {
		fmt.Fprintf(&b, "The agent wants to call %s with %s (call %s): it needs approval.\n", a.Tool, a.Arguments, a.CallID)
	}
	b.WriteString(`Reply to this task with "approve" or "reject" (a reason may follow), or a data part {"approve": true|false, "reason": "...", "call": "<call>"} (with "call", it answers that call alone).`)
	msg := sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: b.String()})
	calls := make([]any, len(w))
	for i, a := range w {
		calls[i] = map[string]any{"call": a.CallID, "key": a.Key, "tool": a.Tool, "arguments": a.Arguments}
	}
	msg.Metadata = map[string]any{approvalsKey: calls}
	return msg
}

// answer applies a message sent to a task in input-required: an approval answer
// for every call that waits among those the answer is bound to (binding), and
// only the one it names when it names one (answerCall): none when they were
// answered meanwhile, as a duplicate answer's were by the first. It returns the seq of the task's task.submitted. It
// reads the session's events from there on when a read of the task found it
// there before (TaskStore.submittedSeq), as the events before it say nothing of
// the task (taskRun.scan); else, or when the task is not there, the whole
// history.
func (e *Executor) answer(ctx context.Context, rc *a2asrv.RequestContext, session, envID string) (uint64, error) {
	approve, reason, err := parseAnswer(rc.Message)
	if err != nil {
		return 0, fmt.Errorf("a2a: %w: %v", sdk.ErrInvalidParams, err)
	}
	var from uint64
	if e.tasks != nil {
		from = e.tasks.submittedSeq(rc.TaskID)
	}
	events, err := taskEvents(ctx, e.backend, session, envID, from)
	if err != nil {
		return 0, fmt.Errorf("a2a: session %s: %w", session, err)
	}
	run := newTaskRun()
	if err := run.scan(events, envID, nil); err != nil {
		return 0, err
	}
	from = 1
	if s := submittedOf(events, envID); s != nil {
		from = s.Seq
	}
	var errs []error
	for _, a := range bindAnswer(run.waiting(), e.binding(rc), answerCall(rc.Message)) {
		if err := e.backend.Approve(ctx, session, a.Key, approve, reason); err != nil {
			errs = append(errs, fmt.Errorf("call %s: %w", a.CallID, err))
		}
	}
	return from, errors.Join(errs...)
}

// binding is the set of keys of the calls the answer rc carries was bound to as
// it came (Dedupe.checkAnswer: those its task's input-required status named and
// its session still waited for), else those the stored task's status names; nil
// (no bound) when neither is known.
func (e *Executor) binding(rc *a2asrv.RequestContext) map[string]string {
	if rc.Message != nil {
		if v, ok := e.bound.Load(boundKey(rc.TaskID, rc.Message.ID)); ok {
			return v.(map[string]string)
		}
	}
	return shownCalls(rc.StoredTask)
}

// boundKey is the key of an answer in Executor.bound: its task and messageId.
func boundKey(task sdk.TaskID, messageID string) string {
	return string(task) + "\x00" + messageID
}

// shownCalls are the calls a task's input-required status names (approvalMessage's
// metadata), call ID by key; nil when it is not in input-required or names none.
func shownCalls(t *sdk.Task) map[string]string {
	if t == nil || t.Status.State != sdk.TaskStateInputRequired || t.Status.Message == nil {
		return nil
	}
	list, _ := t.Status.Message.Metadata[approvalsKey].([]any)
	var out map[string]string
	for _, c := range list {
		m, _ := c.(map[string]any)
		key, _ := m["key"].(string)
		if key == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key], _ = m["call"].(string)
	}
	return out
}

// bindAnswer returns the calls of waiting an answer applies to: those bound
// names (all of them when bound is nil), and of those only the one call names
// (its call_id or key) when call is not "".
func bindAnswer(waiting []*messages.ApprovalRequested, bound map[string]string, call string) []*messages.ApprovalRequested {
	var out []*messages.ApprovalRequested
	for _, a := range waiting {
		if _, ok := bound[a.Key]; bound != nil && !ok {
			continue
		}
		if call != "" && call != a.CallID && call != a.Key {
			continue
		}
		out = append(out, a)
	}
	return out
}

// answerCall is the call an answer names: its data part's "call" (a call_id, or
// the key, as the task's input-required status names them); "" when none.
func answerCall(m *sdk.Message) string {
	for _, p := range m.Parts {
		if d, ok := p.(sdk.DataPart); ok {
			c, _ := d.Data["call"].(string)
			return c
		}
	}
	return ""
}

// callNames names calls for an error message: their call IDs, else keys.
func callNames(calls map[string]string) string {
	names := make([]string, 0, len(calls))
	for k, c := range calls {
		names = append(names, cmp.Or(c, k))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// parseAnswer reads an approval answer: a data part {"approve", "reason"}, or text
// starting with approve/approved/yes/ok or reject/rejected/deny/no, the reason
// after it (after a space, a newline, or in the next text part).
func parseAnswer(m *sdk.Message) (approve bool, reason string, err error) {
	for _, p := range m.Parts {
		if d, ok := p.(sdk.DataPart); ok {
			a, ok := d.Data["approve"].(bool)
			if !ok {
				return false, "", errors.New(`the data part has no boolean "approve"`)
			}
			if c, ok := d.Data["call"]; ok {
				if c, ok := c.(string); !ok || c == "" {
					return false, "", errors.New(`the data part's "call" is no call ID (a string: the call_id the task's status names)`)
				}
			}
			r, _ := d.Data["reason"].(string)
			return a, r, nil
		}
	}
	text := strings.TrimSpace(messageText(m))
	// The word ends at any space: a reason may follow on the next line, or in a
	// text part of its own (messageText joins parts with newlines).
	word, rest := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		word, rest = text[:i], text[i:]
	}
	switch strings.ToLower(strings.Trim(word, ".,:;!")) {
	case "approve", "approved", "yes", "ok", "y":
		return true, strings.TrimSpace(rest), nil
	case "reject", "rejected", "deny", "denied", "no", "n":
		return false, strings.TrimSpace(rest), nil
	}
	return false, "", fmt.Errorf(`the task waits for approval: answer "approve" or "reject" (a reason may follow), not %q`, truncate(text, 80))
}

// Cancel cancels the task and reports it canceled. A backend that cancels a
// task by its ID (TaskCanceler) cancels it whether it runs or waits its turn
// behind another task of its session (sent while that one ran), and never the
// other task, even when the task ends just before the cancellation is handled;
// one that ends it neither running nor waiting answers sdk.ErrTaskNotCancelable.
// With another backend, which cancels whatever task the session runs, a task
// queued behind another is refused (sdk.ErrTaskNotCancelable, saying which task
// runs): cancelling the session's would cancel the other task.
func (e *Executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	tc, named := e.backend.(TaskCanceler)
	_, envID, ok := ParseTaskID(rc.TaskID)
	switch {
	case ok && named:
		if err := tc.CancelTask(ctx, rc.ContextID, envID, "a2a tasks/cancel"); errors.Is(err, ErrTaskNotRunning) {
			return fmt.Errorf("%w: task %s: %w", sdk.ErrTaskNotCancelable, rc.TaskID, err)
		} else if errors.Is(err, ErrCancelUnconfirmed) {
			return fmt.Errorf("%w: task %s: %w: tasks/get tells how it ends", sdk.ErrInternalError, rc.TaskID, err)
		} else if err != nil {
			return fmt.Errorf("a2a: cancel task %s: %w", rc.TaskID, err)
		}
	case ok:
		running, err := e.runningTask(ctx, rc.ContextID)
		if err != nil {
			return err
		}
		if running != "" && running != envID {
			return fmt.Errorf("%w: task %s is queued behind the task its context runs (%s~%s): it can be canceled once it runs",
				sdk.ErrTaskNotCancelable, rc.TaskID, rc.ContextID, strings.TrimPrefix(running, "a2a-"))
		}
		fallthrough
	default:
		if err := e.backend.Cancel(ctx, rc.ContextID, "a2a tasks/cancel"); err != nil {
			return fmt.Errorf("a2a: cancel session %s: %w", rc.ContextID, err)
		}
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

// runningTask is the task.submitted envelope ID of the task session runs
// (RunningTask): the backend's when it tells it (RunningTasks), else, or when it
// fails, from the session's whole history.
func (e *Executor) runningTask(ctx context.Context, session string) (string, error) {
	if rt, ok := e.backend.(RunningTasks); ok {
		if running, err := rt.RunningTask(ctx, session); err == nil {
			return running, nil
		}
	}
	events, err := e.backend.Events(ctx, session, 1)
	if err != nil {
		return "", fmt.Errorf("a2a: session %s: %w", session, err)
	}
	return RunningTask(events), nil
}

// RunningTask is the task.submitted envelope ID of the task a session's events
// say it runs: the first submitted that has not ended (a session runs its tasks
// one at a time, in the order they came); "" when none runs.
func RunningTask(events []messages.Envelope) string {
	ended := map[string]bool{}
	for _, ev := range events {
		if ev.Type == messages.TypeTaskCompleted || ev.Type == messages.TypeTaskFailed {
			ended[ev.CorrelationID] = true
		}
	}
	for _, ev := range events {
		if ev.Type == messages.TypeTaskSubmitted && !ended[cmp.Or(ev.CorrelationID, ev.ID)] {
			return ev.ID
		}
	}
	return ""
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
		case sdk.FilePart:
			if text, name, err := fileText(v); err == nil {
				parts = append(parts, "[file "+name+"]\n"+text)
			}
		}
	}
	return strings.Join(parts, "\n")
}

// checkFiles reports the first file part of m the agent cannot read (fileText),
// wrapping sdk.ErrUnsupportedContentType (-32005). It used to be taken and left
// out of the task's input without a word: the client got an answer that ignored
// its attachment.
func checkFiles(m *sdk.Message) error {
	for i, p := range m.Parts {
		if f, ok := p.(sdk.FilePart); ok {
			if _, _, err := fileText(f); err != nil {
				return fmt.Errorf("a2a: %w: message.parts[%d]: %w", sdk.ErrUnsupportedContentType, i, err)
			}
		}
	}
	return nil
}

// fileText is the content of a file part as the agent reads it, and the name it
// goes by: a file sent as bytes of a text media type (text/*, JSON, XML, YAML, or
// none given) that are UTF-8. The agent reads text only, as the agent card says
// (defaultInputModes); a file given by URI is not fetched (the node would fetch
// what a client names, on the client's word).
func fileText(f sdk.FilePart) (text, name string, err error) {
	switch c := f.File.(type) {
	case sdk.FileBytes:
		name = cmp.Or(c.Name, "attachment")
		if !textMedia(c.MimeType) {
			return "", name, fmt.Errorf("file %q is %s: the agent reads text files only (text/*, application/json, XML or YAML)", truncate(name, 100), truncate(c.MimeType, 100))
		}
		b, ok := decodeBase64(c.Bytes)
		switch {
		case !ok:
			return "", name, fmt.Errorf("file %q: its bytes are not base64", truncate(name, 100))
		case !utf8.Valid(b):
			return "", name, fmt.Errorf("file %q is not UTF-8 text", truncate(name, 100))
		}
		return string(b), name, nil
	case sdk.FileURI:
		return "", "", fmt.Errorf("a file by uri (%s) is not fetched: send its content as bytes", truncate(c.URI, 100))
	default:
		return "", "", errors.New("a file part with no content")
	}
}

// textMedia reports whether a media type (its parameters aside) is text the agent
// reads; an empty one is taken for text, whose bytes must then be UTF-8.
func textMedia(mediaType string) bool {
	mt, _, err := mime.ParseMediaType(mediaType)
	if mediaType == "" {
		return true
	}
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"), strings.HasSuffix(mt, "+yaml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml", "application/x-ndjson":
		return true
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ClaimKey marks, in its metadata, a task Dedupe saved before its execution
// started: the executor starts it as a new task (a2asrv hands it over as a stored
// one, as it does a task answered after input-required).
const ClaimKey = "troupe_claimed"

// Dedupe is an a2asrv.RequestHandler that makes message/send and message/stream
// idempotent by messageId and gives each task the ID TaskIDFor: a message that
// names no context gets one derived from its messageId (ContextFor), and its task
// the ID derived from its context and messageId, claimed in the store before the
// SDK runs it. A message seen before — by this process, or by any over the same
// log, whose session has the task — answers with the task it started instead of
// starting another.
//
// It serves tasks/resubscribe from the sessions' events too (OnResubscribeToTask).
type Dedupe struct {
	a2asrv.RequestHandler
	exec  *Executor
	store *TaskStore
	// checkPush refuses a webhook URL no push could reach (nil: any URL).
	checkPush func(string) error
	// pushEnd posts an ended task to a config just set for it (nil: nothing).
	pushEnd func(ctx context.Context, cfg *sdk.PushConfig, task *sdk.Task) error
	// answers are the answers to tasks taken, by boundKey (takeAnswer): one
	// sent again with the same messageId answers as the first, and no call.
	// answerOrder holds them in the order they came (the oldest first).
	amu         sync.Mutex
	answers     map[string]*answerRecord
	answerOrder list.List
}

var _ a2asrv.RequestHandler = (*Dedupe)(nil)

// NewDedupe wraps h, whose executor is exec and task store store.
func NewDedupe(h a2asrv.RequestHandler, exec *Executor, store *TaskStore) *Dedupe {
	exec.tasks = store // where its reads found a task, its executor's read from
	return &Dedupe{RequestHandler: h, exec: exec, store: store}
}

// prepare gives a new message its context and its task, and returns the task a
// message seen before started (ok false: none, go on).
func (d *Dedupe) prepare(ctx context.Context, p *sdk.MessageSendParams) (sdk.TaskID, bool, error) {
	if p == nil || p.Message == nil || p.Message.ID == "" || p.Message.TaskID != "" {
		return "", false, nil
	}
	if p.Message.ContextID == "" {
		p.Message.ContextID = ContextFor(p.Message.ID)
	}
	// A message that would start no task is refused before its task is claimed:
	// the SDK would answer a claimed task's failure with the task, failed, and
	// without the reason.
	if err := d.exec.check(p.Message); err != nil {
		return "", false, err
	}
	id := TaskIDFor(p.Message.ContextID, p.Message.ID)
	if legacy, ok, err := d.legacy(ctx, p.Message.ContextID, p.Message.ID, id); err != nil || ok {
		return legacy, ok, err
	}
	task := &sdk.Task{ID: id, ContextID: p.Message.ContextID, Status: sdk.TaskStatus{State: sdk.TaskStateSubmitted},
		Metadata: map[string]any{ClaimKey: true}}
	claimed, err := d.store.claim(ctx, task)
	if err != nil {
		return "", false, err
	}
	if !claimed {
		return id, true, nil
	}
	p.Message.TaskID = id
	d.exec.refused.Delete(id) // a refusal of an earlier sending its client never heard
	return "", false, nil
}

// legacy returns the task message messageID started in session under its
// legacy envelope ID (legacyEnvelopeID), recorded by a build before EnvelopeID
// took the context, and true; false when the session has none, or has the task
// under its ID id too (the new ID is looked up first). A client retrying a
// message/send across the upgrade sent its message again to the same context:
// it started the task a second time.
func (d *Dedupe) legacy(ctx context.Context, session, messageID string, id sdk.TaskID) (sdk.TaskID, bool, error) {
	envID := legacyEnvelopeID(messageID)
	legacy := sdk.TaskID(session + taskIDSep + strings.TrimPrefix(envID, "a2a-"))
	if legacy == id || d.store.holds(id) {
		return "", false, nil
	}
	recorded := func(envID string, id sdk.TaskID) (bool, error) {
		f, ok := d.exec.backend.(EventFinder)
		if !ok {
			_, err := d.store.Get(ctx, id)
			if errors.Is(err, sdk.ErrTaskNotFound) {
				return false, nil
			}
			return err == nil, err
		}
		ev, found, err := f.FindEvent(ctx, session, envID)
		if err != nil {
			return false, fmt.Errorf("a2a: session %s: %w", session, err)
		}
		return found && ev.Type == messages.TypeTaskSubmitted, nil
	}
	if ok, err := recorded(envID, legacy); err != nil || !ok {
		return "", false, err
	}
	if ok, err := recorded(EnvelopeID(session, messageID), id); err != nil || ok {
		return "", false, err
	}
	return legacy, true, nil
}

// OnSendMessage implements a2asrv.RequestHandler.
func (d *Dedupe) OnSendMessage(ctx context.Context, p *sdk.MessageSendParams) (_ sdk.SendMessageResult, err error) {
	if err := d.checkSentPush(p); err != nil {
		return nil, err
	}
	answer := namesTask(p)
	if answer {
		rec, first := d.takeAnswer(p)
		if !first {
			t, err := d.answeredBefore(ctx, p, rec)
			if err != nil {
				return nil, err
			}
			return withHistory(t, p), nil
		}
		defer func() { d.answered(p, rec, err) }()
	}
	bound, err := d.checkAnswer(ctx, p)
	if err != nil {
		return nil, err
	}
	if bound != nil {
		key := boundKey(p.Message.TaskID, p.Message.ID)
		d.exec.bound.Store(key, bound)
		defer d.exec.bound.Delete(key)
	}
	id, seen, err := d.prepare(ctx, p)
	if err != nil {
		return nil, err
	}
	if seen {
		var t *sdk.Task
		if blocking(p) {
			t, err = d.awaitTask(ctx, id)
		} else {
			t, err = d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
		}
		if err != nil {
			return nil, err
		}
		return withHistory(t, p), nil
	}
	res, err := d.RequestHandler.OnSendMessage(ctx, p)
	if answer {
		err = whileExecuting(ctx, err, func() error {
			if err := d.stillBound(ctx, p.Message.TaskID, bound); err != nil {
				res = nil
				return err
			}
			res, err = d.RequestHandler.OnSendMessage(ctx, p)
			return err
		})
	}
	if err != nil && stopping(ctx) && p != nil && p.Message != nil {
		if t := d.standing(ctx, p.Message.TaskID); t != nil {
			res, err = t, nil
		}
	}
	if t, ok := res.(*sdk.Task); ok && err == nil && t.Status.State == sdk.TaskStateFailed {
		if refused, ok := d.exec.refusal(t.ID); ok {
			res, err = nil, refused
		}
	}
	if err != nil && p != nil && p.Message != nil {
		d.store.release(p.Message.TaskID)
	}
	if t, ok := res.(*sdk.Task); ok && t.Metadata[ClaimKey] != nil {
		// A task that failed before it started keeps the claim's mark: not the client's.
		c := *t
		c.Metadata = maps.Clone(t.Metadata)
		delete(c.Metadata, ClaimKey)
		res = &c
	}
	if t, ok := res.(*sdk.Task); ok {
		res = withHistory(t, p)
	}
	return res, err
}

// withHistory is task t with the history its sender asked for
// (configuration.historyLength), as tasks/get cuts it: none for 0, the last n
// messages for n; the whole history when the sender did not say.
func withHistory(t *sdk.Task, p *sdk.MessageSendParams) *sdk.Task {
	if t == nil || p == nil || p.Config == nil || p.Config.HistoryLength == nil {
		return t
	}
	c := *t
	if n := *p.Config.HistoryLength; n <= 0 {
		c.History = []*sdk.Message{}
	} else if n < len(t.History) {
		c.History = t.History[len(t.History)-n:]
	}
	return &c
}

// blocking reports whether the client of p waits for its task to end (or to ask
// for input), as the SDK takes it: unless its configuration says "blocking": false.
func blocking(p *sdk.MessageSendParams) bool {
	return p == nil || p.Config == nil || p.Config.Blocking == nil || *p.Config.Blocking
}

// awaitTask answers a blocking message seen before as its first sending is
// answered: with task id once it ended or asks for input, not as it is meanwhile
// (a client retrying a message/send whose answer it lost would otherwise take a
// working task, and its partial answer, for the task's end). It follows the task's
// session's events (subscribe); a task claimed by a sending whose execution has
// not recorded it yet is read again, a little later each time, until it is. It
// waits as long as the request does.
func (d *Dedupe) awaitTask(ctx context.Context, id sdk.TaskID) (*sdk.Task, error) {
	wait := 10 * time.Millisecond
	for {
		for _, err := range d.subscribe(ctx, &sdk.TaskIDParams{ID: id}, subscription{}) {
			if err != nil {
				break
			}
		}
		t, err := d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
		if err != nil || t.Status.State.Terminal() || t.Status.State == sdk.TaskStateInputRequired ||
			t.Status.State == sdk.TaskStateAuthRequired {
			return t, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return t, nil
		case <-timer.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// checkSentPush refuses a message whose configuration names a push webhook no push
// could reach (checkPush), before it starts a task.
func (d *Dedupe) checkSentPush(p *sdk.MessageSendParams) error {
	if d.checkPush == nil || p == nil || p.Config == nil || p.Config.PushConfig == nil {
		return nil
	}
	return d.checkPush(p.Config.PushConfig.URL)
}

// namesTask reports whether p is a message to a task (an answer to a task in
// input-required).
func namesTask(p *sdk.MessageSendParams) bool {
	return p != nil && p.Message != nil && p.Message.TaskID != ""
}

// checkAnswer refuses, before the SDK runs it, a message to a task that takes
// none: one that runs (submitted or working: here, on another node, or resumed
// after a restart), and one in input-required that neither approves nor rejects
// its call (parseAnswer). The SDK answers its execution's error with the task
// failed, and no reason, which tasks/get answers from then on, though the
// session's task runs on or its call still waits (and an approval sent next was
// refused as to a task that ended). A message to a task that ended, or to no
// task, is the SDK's to answer.
//
// It returns the calls (call ID by key) an answer is bound to: an approval is
// given to the calls its client was shown, and no other. They are the calls the
// session's events have waiting now (the task's own status may be behind them:
// its execution has yet to report it input-required) which the task's
// input-required status, as this process holds it, names, and of those the one
// the answer names, if it names one ({"call": …}). An answer bound to no call is
// refused: the calls its task's status names were answered (over the task API,
// by another answer, or their approval timed out) and the task waits for others,
// or for none; the task's status is then refreshed from its session's events,
// which the refusal names, for the client to answer them.
func (d *Dedupe) checkAnswer(ctx context.Context, p *sdk.MessageSendParams) (map[string]string, error) {
	if !namesTask(p) {
		return nil, nil
	}
	task, err := d.store.Get(ctx, p.Message.TaskID)
	if err != nil || task.Status.State.Terminal() {
		return nil, nil
	}
	logged, run, lerr := d.store.loggedRun(ctx, p.Message.TaskID)
	if st := task.Status.State; st != sdk.TaskStateInputRequired {
		// A task this process runs is as its execution reported it last, which
		// may be behind its session's events: they have the call waiting for
		// approval as soon as the session records it, and tasks/get on another
		// node over the same log answers from them (input-required) while this
		// node's execution has yet to hear of it (over the bus, in a cluster).
		// A client answering at once takes the SDK once the execution reported
		// it (whileExecuting), as before this check.
		if lerr != nil || logged.Status.State != sdk.TaskStateInputRequired {
			return nil, fmt.Errorf("a2a: %w: task %s is %s; only a task in input-required takes another message", sdk.ErrInvalidParams, task.ID, st)
		}
	}
	_, reason, err := parseAnswer(p.Message)
	if err != nil {
		return nil, fmt.Errorf("a2a: %w: task %s: %v", sdk.ErrInvalidParams, task.ID, err)
	}
	if c, ok := d.exec.backend.(AnswerChecker); ok {
		if err := c.CheckAnswerReason(reason); err != nil {
			return nil, fmt.Errorf("a2a: %w: task %s: %w", sdk.ErrInvalidParams, task.ID, err)
		}
	}
	if lerr != nil {
		// The session's events cannot be read: the execution answers the calls
		// the task's status names, if they wait (Executor.binding).
		return nil, nil
	}
	shown := shownCalls(task)
	waiting := run.waiting()
	calls := bindAnswer(waiting, shown, answerCall(p.Message))
	if len(calls) > 0 {
		bound := make(map[string]string, len(calls))
		for _, a := range calls {
			bound[a.Key] = a.CallID
		}
		return bound, nil
	}
	now := map[string]string{}
	for _, a := range waiting {
		now[a.Key] = a.CallID
	}
	if call := answerCall(p.Message); call != "" && len(bindAnswer(waiting, nil, call)) == 0 {
		return nil, fmt.Errorf("a2a: %w: task %s waits for no call %q (%s)", sdk.ErrInvalidParams, task.ID, call, waitsFor(now))
	}
	if len(now) > 0 && shown != nil {
		d.store.refresh(task.ID, shown, logged.Status)
	}
	return nil, answeredAlready(task.ID, shown, now)
}

// waitsFor says which calls a task waits for.
func waitsFor(now map[string]string) string {
	if len(now) == 0 {
		return "it waits for no approval"
	}
	return "it waits for call " + callNames(now) + ": tasks/get names it"
}

// answeredAlready is the refusal of an answer bound to no call that waits: the
// calls shown (nil: not known) were answered, and the task waits for those of
// now, if any.
func answeredAlready(id sdk.TaskID, shown, now map[string]string) error {
	what := "the calls it waited for were"
	if len(shown) > 0 {
		what = "call " + callNames(shown) + " was"
	}
	if len(now) == 0 {
		return fmt.Errorf("a2a: %w: task %s: %s answered already and it works on; only a task in input-required takes another message", sdk.ErrInvalidParams, id, what)
	}
	return fmt.Errorf("a2a: %w: task %s: %s answered already; %s (answer again to answer it)", sdk.ErrInvalidParams, id, what, waitsFor(now))
}

// stillBound refuses an answer bound to calls (checkAnswer) none of which waits
// any more: an answer sent again while the first was being taken (whileExecuting)
// finds its call answered by the first, and the task perhaps waiting for another
// call, which its client never saw.
func (d *Dedupe) stillBound(ctx context.Context, id sdk.TaskID, bound map[string]string) error {
	if bound == nil {
		return nil
	}
	_, run, err := d.store.loggedRun(ctx, id)
	if err != nil {
		return nil // the execution answers only the bound calls that wait
	}
	now := map[string]string{}
	for _, a := range run.waiting() {
		if _, ok := bound[a.Key]; ok {
			return nil
		}
		now[a.Key] = a.CallID
	}
	return answeredAlready(id, bound, now)
}

// maxAnswers bounds the answers Dedupe remembers (takeAnswer): past it, the
// oldest it took (those answered) are forgotten first.
const maxAnswers = maxLiveTasks

// answerRecord is an answer to a task (by its task and messageId) Dedupe took:
// done closes once it was answered, with err.
type answerRecord struct {
	done chan struct{}
	err  error
	// key is its key in Dedupe.answers, at its place in Dedupe.answerOrder (nil:
	// not remembered).
	key string
	at  *list.Element
}

// takeAnswer records the answer p (a message to a task) and reports whether it is
// the first of its messageId to the task; else it returns the first's record. A
// message without an ID is always the first. Past maxAnswers, the oldest answers
// answered are forgotten, a tenth of them at once, never the latest: a client
// retries an answer soon after it sent it.
func (d *Dedupe) takeAnswer(p *sdk.MessageSendParams) (*answerRecord, bool) {
	rec := &answerRecord{done: make(chan struct{})}
	if p.Message.ID == "" {
		return rec, true
	}
	rec.key = boundKey(p.Message.TaskID, p.Message.ID)
	d.amu.Lock()
	defer d.amu.Unlock()
	if old, ok := d.answers[rec.key]; ok {
		return old, false
	}
	if len(d.answers) >= maxAnswers {
		for e := d.answerOrder.Front(); e != nil && len(d.answers) > maxAnswers-maxAnswers/10; {
			next := e.Next()
			select {
			case <-e.Value.(*answerRecord).done:
				d.forget(e.Value.(*answerRecord))
			default: // still being taken: its retry waits for it
			}
			e = next
		}
	}
	if d.answers == nil {
		d.answers = map[string]*answerRecord{}
	}
	d.answers[rec.key] = rec
	rec.at = d.answerOrder.PushBack(rec)
	return rec, true
}

// forget drops rec from the answers remembered; d.amu is held.
func (d *Dedupe) forget(rec *answerRecord) {
	if rec.at == nil || d.answers[rec.key] != rec {
		return
	}
	delete(d.answers, rec.key)
	d.answerOrder.Remove(rec.at)
	rec.at = nil
}

// answered ends rec, the answer p, with err: an answer refused for a reason
// other than its params (the log failed) is forgotten, so that it may be sent
// again.
func (d *Dedupe) answered(p *sdk.MessageSendParams, rec *answerRecord, err error) {
	rec.err = err
	close(rec.done)
	if err != nil && !errors.Is(err, sdk.ErrInvalidParams) && p.Message.ID != "" {
		d.amu.Lock()
		d.forget(rec)
		d.amu.Unlock()
	}
}

// answeredBefore waits for the first sending of an answer (rec) to be taken,
// and answers as it did: its error, or the task as it is now (as its first
// sending left it: once it ended or asks for input again, for a blocking
// client). It answers no call.
func (d *Dedupe) answeredBefore(ctx context.Context, p *sdk.MessageSendParams, rec *answerRecord) (*sdk.Task, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-rec.done:
	}
	if rec.err != nil {
		return nil, rec.err
	}
	if blocking(p) {
		return d.awaitTask(ctx, p.Message.TaskID)
	}
	return d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: p.Message.TaskID})
}

// whileExecuting calls send again, a little later each time, while its error says
// that the task the message names has an execution still (the SDK's "task
// execution is already in progress"), for 3 s at most, and returns its last error:
// a client answers a task in input-required as soon as it reads that status, which
// the task's execution reports just before it ends.
func whileExecuting(ctx context.Context, err error, send func() error) error {
	executing := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "execution is already in progress")
	}
	deadline := time.Now().Add(3 * time.Second)
	wait := 10 * time.Millisecond
	for executing(err) && time.Now().Before(deadline) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
		err = send()
	}
	return err
}

// errStopping is the cause of the end of a request's context when the server
// stops (ServerConfig.Stopping).
var errStopping = errors.New("a2a: the server stops")

// stopping reports whether ctx, a request's, ended because the server stops.
func stopping(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errStopping)
}

// withStopping is ctx ended, with the cause errStopping, once stopping closes;
// its cancel releases it.
func withStopping(ctx context.Context, stopping <-chan struct{}) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-stopping:
			cancel(errStopping)
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// standing is task id as it stands, for the blocking message/send that started or
// answered it when the server stops; nil when it cannot be read, or its session
// has not taken it yet (the send's error stands then).
func (d *Dedupe) standing(ctx context.Context, id sdk.TaskID) *sdk.Task {
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	t, err := d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
	if err != nil || t == nil || claimed(t) {
		return nil
	}
	return t
}

// streamStop is a stream's end when the server stops (ServerConfig.Stopping): its
// events end (endOnStop), and cut says whether they ended so before the task's
// own end, for the server to write its last event (Server.guard).
type streamStop struct {
	stopping <-chan struct{}
	cut      atomic.Bool
}

type streamStopKey struct{}

// endOnStop is the events events(ctx) makes, ended once the server stops, without
// the error of their context's end: the stream's streamStop (of ctx, set by
// Server.guard; none: events as they are) then says whether the stop cut them,
// for the server's last event to say so. An event yielded is written whole (the
// SDK's handler is not cancelled by the stop), so a task whose final event was
// yielded as the server stopped ends its stream with that event alone, and one
// whose final event came after the stop ends it with the server's.
func endOnStop(ctx context.Context, events func(context.Context) iter.Seq2[sdk.Event, error]) iter.Seq2[sdk.Event, error] {
	st, _ := ctx.Value(streamStopKey{}).(*streamStop)
	if st == nil {
		return events(ctx)
	}
	return func(yield func(sdk.Event, error) bool) {
		ctx, cancel := withStopping(ctx, st.stopping)
		defer cancel(nil)
		ended := false // the last event yielded ends the stream
		for ev, err := range events(ctx) {
			if stopping(ctx) {
				st.cut.Store(true)
				return
			}
			ended = err != nil || endsStream(ctx, ev)
			if !yield(ev, err) {
				return
			}
		}
		if stopping(ctx) && !ended {
			st.cut.Store(true)
		}
	}
}

// endsStream says whether ev is the last event of a stream (of ctx's request):
// a message, a final status, a task that ended (or, in 0.3, waits for input).
func endsStream(ctx context.Context, ev sdk.Event) bool {
	switch v := ev.(type) {
	case *sdk.Message:
		return true
	case *sdk.TaskStatusUpdateEvent:
		return v.Final || v.Status.State.Terminal()
	case *sdk.Task:
		st := v.Status.State
		return st.Terminal() || !isV1(ctx) && (st == sdk.TaskStateInputRequired || st == sdk.TaskStateAuthRequired)
	}
	return false
}

// OnSendMessageStream implements a2asrv.RequestHandler: a message seen before
// subscribes to its task while it runs (here, on another node, or resumed after a
// restart), else yields the task as it is. The stream ends once the server stops
// (endOnStop).
func (d *Dedupe) OnSendMessageStream(ctx context.Context, p *sdk.MessageSendParams) iter.Seq2[sdk.Event, error] {
	return endOnStop(ctx, func(ctx context.Context) iter.Seq2[sdk.Event, error] { return d.sendMessageStream(ctx, p) })
}

func (d *Dedupe) sendMessageStream(ctx context.Context, p *sdk.MessageSendParams) iter.Seq2[sdk.Event, error] {
	if err := d.checkSentPush(p); err != nil {
		return func(yield func(sdk.Event, error) bool) { yield(nil, err) }
	}
	answer := namesTask(p)
	if answer {
		// The answer is taken as the stream is read: one never read answers
		// nothing, and a retry of it does not wait for it.
		return func(yield func(sdk.Event, error) bool) {
			rec, first := d.takeAnswer(p)
			if !first {
				t, err := d.answeredBefore(ctx, p, rec)
				if err != nil {
					yield(nil, err)
					return
				}
				yield(withHistory(t, p), nil)
				return
			}
			bound, err := d.checkAnswer(ctx, p)
			if err != nil {
				d.answered(p, rec, err)
				yield(nil, err)
				return
			}
			if bound != nil {
				key := boundKey(p.Message.TaskID, p.Message.ID)
				d.exec.bound.Store(key, bound)
				defer d.exec.bound.Delete(key)
			}
			next, stop := iter.Pull2(d.RequestHandler.OnSendMessageStream(ctx, p))
			ev, err, ok := next()
			err = whileExecuting(ctx, err, func() error {
				stop()
				if err := d.stillBound(ctx, p.Message.TaskID, bound); err != nil {
					next, stop = func() (sdk.Event, error, bool) { return nil, nil, false }, func() {}
					ev, ok = nil, true
					return err
				}
				next, stop = iter.Pull2(d.RequestHandler.OnSendMessageStream(ctx, p))
				ev, err, ok = next()
				return err
			})
			d.answered(p, rec, err)
			defer func() { stop() }()
			for ok {
				if !yield(ev, err) {
					return
				}
				ev, err, ok = next()
			}
		}
	}
	id, seen, err := d.prepare(ctx, p)
	if err != nil {
		return func(yield func(sdk.Event, error) bool) { yield(nil, err) }
	}
	if !seen {
		return func(yield func(sdk.Event, error) bool) {
			first := true
			for ev, err := range d.RequestHandler.OnSendMessageStream(ctx, p) {
				if t, ok := ev.(*sdk.Task); ok && first && err == nil && t.Status.State == sdk.TaskStateFailed {
					if refused, ok := d.exec.refusal(t.ID); ok {
						ev, err = nil, refused
					}
				}
				if first && err != nil && p != nil && p.Message != nil {
					d.store.release(p.Message.TaskID)
				}
				first = false
				if !yield(ev, err) {
					return
				}
			}
		}
	}
	return func(yield func(sdk.Event, error) bool) {
		t, err := d.RequestHandler.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
		if err != nil || t.Status.State.Terminal() || t.Status.State == sdk.TaskStateInputRequired {
			yield(t, err)
			return
		}
		for ev, err := range d.subscribe(ctx, &sdk.TaskIDParams{ID: id}, subscription{}) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// OnCancelTask implements a2asrv.RequestHandler: a task that ended (completed,
// failed, rejected or canceled) is refused with TaskNotCancelableError (-32002),
// as the specification says of a task in a terminal state and the Python SDK's
// servers answer; the SDK's handler refuses all but a canceled one, which it
// answered as if the cancellation had been taken again. A task the node does not
// know is TaskNotFoundError (-32001).
func (d *Dedupe) OnCancelTask(ctx context.Context, p *sdk.TaskIDParams) (*sdk.Task, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no task", sdk.ErrInvalidParams)
	}
	task, err := d.store.Get(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	if task.Status.State.Terminal() {
		return nil, fmt.Errorf("%w: task %s is %s already", sdk.ErrTaskNotCancelable, p.ID, task.Status.State)
	}
	return d.RequestHandler.OnCancelTask(ctx, p)
}

// OnGetTaskPushConfig implements a2asrv.RequestHandler: a config of a task the
// node has (this endpoint's agent's, TaskStore.foreign); of a task it does not
// know, TaskNotFoundError (-32001), as for its list.
func (d *Dedupe) OnGetTaskPushConfig(ctx context.Context, p *sdk.GetTaskPushConfigParams) (*sdk.TaskPushConfig, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no task", sdk.ErrInvalidParams)
	}
	if _, err := d.store.Get(ctx, p.TaskID); err != nil {
		return nil, err
	}
	return d.RequestHandler.OnGetTaskPushConfig(ctx, p)
}

// OnListTaskPushConfig implements a2asrv.RequestHandler: the configs of a task
// the node has; of a task it does not know, TaskNotFoundError (-32001), as the
// specification lists it and the Python SDK's servers answer, not an empty list.
func (d *Dedupe) OnListTaskPushConfig(ctx context.Context, p *sdk.ListTaskPushConfigParams) ([]*sdk.TaskPushConfig, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no task", sdk.ErrInvalidParams)
	}
	if _, err := d.store.Get(ctx, p.TaskID); err != nil {
		return nil, err
	}
	return d.RequestHandler.OnListTaskPushConfig(ctx, p)
}

// OnDeleteTaskPushConfig implements a2asrv.RequestHandler: a config of a task
// the node has is deleted (one the task does not have: nothing to do); of a task
// it does not know, TaskNotFoundError (-32001), as for its list.
func (d *Dedupe) OnDeleteTaskPushConfig(ctx context.Context, p *sdk.DeleteTaskPushConfigParams) error {
	if p == nil {
		return fmt.Errorf("%w: no task", sdk.ErrInvalidParams)
	}
	if _, err := d.store.Get(ctx, p.TaskID); err != nil {
		return err
	}
	return d.RequestHandler.OnDeleteTaskPushConfig(ctx, p)
}

// OnSetTaskPushConfig implements a2asrv.RequestHandler: a config is set for a task
// the node has (live, or in its session's events), not for any ID (each config is
// written to the log: PushStore). A config set for a task that ended is sent the
// task, its end, at once.
func (d *Dedupe) OnSetTaskPushConfig(ctx context.Context, p *sdk.TaskPushConfig) (*sdk.TaskPushConfig, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no push config", sdk.ErrInvalidParams)
	}
	if d.checkPush != nil {
		if err := d.checkPush(p.Config.URL); err != nil {
			return nil, err
		}
	}
	task, err := d.store.Get(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	out, err := d.RequestHandler.OnSetTaskPushConfig(ctx, p)
	if err == nil && d.pushEnd != nil && task.Status.State.Terminal() {
		// The task ended before its config was set: no update will follow, so
		// the webhook hears of the end now, as it would have had it been set
		// earlier (a client that set it after a restart, or late).
		// It is sent in the background (retried, logged when not delivered); the
		// config is set either way.
		cfg := out.Config
		_ = d.pushEnd(ctx, &cfg, task)
	}
	return out, err
}
