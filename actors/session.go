package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// EventStore is what a session actor needs of the event log: append its events and
// read them back. eventlog.Log satisfies it.
type EventStore interface {
	Append(ctx context.Context, events []messages.Envelope) error
	Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error)
}

// SessionDeps are what every session actor of a node shares.
type SessionDeps struct {
	Store EventStore
	// Publisher receives every appended event on messages.TopicEvents and every task
	// result on messages.TopicResults (and on the task's reply topic). It may be nil.
	Publisher message.Publisher
	Agent     Agent
	// Model is the ModelActor; Tools maps tool names to ToolActors.
	Model *actor.PID
	Tools map[string]*actor.PID
	Clock Clock
	// IOTimeout bounds each append and read (default 30 s).
	IOTimeout time.Duration
	// MaxParallelTools bounds a session's tool calls in flight (default 4).
	MaxParallelTools int
	// IdleTimeout passivates a session with no running task (default 1 minute).
	IdleTimeout time.Duration
	// Stopping is closed when the node shuts down; it ends retries of a failing log.
	Stopping <-chan struct{}
	// Redactor removes secrets from tasks and effect results before they are applied,
	// recorded or published (default: token-shaped strings only).
	Redactor *SecretRedactor
	Logger   *slog.Logger
}

func (d *SessionDeps) withDefaults() {
	if d.IOTimeout <= 0 {
		d.IOTimeout = 30 * time.Second
	}
	if d.MaxParallelTools <= 0 {
		d.MaxParallelTools = 4
	}
	if d.IdleTimeout <= 0 {
		d.IdleTimeout = time.Minute
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Redactor == nil {
		d.Redactor = NewSecretRedactor()
	}
}

// SubmitTask asks a session to run a task. The reply is a *TaskAccepted or an error.
type SubmitTask struct {
	Envelope messages.Envelope
}

// TaskAccepted answers SubmitTask once the task is durably recorded.
type TaskAccepted struct {
	SessionID string
	Seq       uint64
	// Duplicate is true when the task's message ID had been recorded before.
	Duplicate bool
}

// CancelTask stops a session's running task; the reply is a *TaskAccepted for the
// cancellation event or an error (ErrNoRunningTask when the session is idle).
type CancelTask struct {
	SessionID string
	Reason    string
}

// ResumeSession wakes a session so it folds its events and continues unfinished work.
type ResumeSession struct {
	SessionID string
}

// ErrNoRunningTask answers CancelTask on an idle session.
var ErrNoRunningTask = errors.New("actors: the session has no running task")

// Messages between a session and the model and tool actors.
type (
	// ModelCall asks the ModelActor for one response; the answer is a *ModelResult sent to ReplyTo.
	ModelCall struct {
		Request   llm.Request
		ReplyTo   *actor.PID
		SessionID string
	}
	// ModelResult is the ModelActor's answer.
	ModelResult struct {
		Key       string
		Model     string
		Response  llm.Response
		Err       error
		LatencyUS int64
	}
	// ToolCall asks a ToolActor to run; the answer is a *ToolResult sent to ReplyTo.
	ToolCall struct {
		Request messages.ToolCallRequested
		ReplyTo *actor.PID
	}
	// ToolResult is a ToolActor's answer.
	ToolResult struct {
		Key       string
		Output    string
		Err       error
		LatencyUS int64
	}
)

// Drain asks a session to issue no more effects and to answer with *Drained once none
// of its effects is in flight: results that arrive meanwhile are recorded, and effects
// decided meanwhile are recorded as requested, for the session's next owner to issue.
// A node hands its sessions over this way when Kafka moves their partitions, so that
// tool calls in flight finish and are recorded instead of being performed again.
type Drain struct{}

// Drained answers Drain.
type Drained struct{}

// deadlineTick wakes a session to check its running task's deadline.
type deadlineTick struct{}

// passivate is sent by a session to its host when it has been idle; handled is the
// number of host-forwarded messages it has processed.
type passivate struct{ handled int }

// SessionActor owns one session: it is the only writer of the session's events.
type SessionActor struct {
	id      string
	deps    *SessionDeps
	state   *SessionState
	handled int
	// inflight counts dispatched, unanswered tool calls; queue holds the rest.
	inflight map[string]bool
	queue    []PendingCall
	modelKey string
	timer    *time.Timer
	// draining is set by Drain; drainer waits for Drained.
	draining bool
	drainer  *actor.PID
}

var _ actor.Actor = (*SessionActor)(nil)

func newSessionActor(id string, deps *SessionDeps) *SessionActor {
	return &SessionActor{id: id, deps: deps}
}

// Receive implements actor.Actor.
func (a *SessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.recover(ctx)
	case *actor.Restarting, *actor.Stopping:
		a.stopTimer()
	case *actor.ReceiveTimeout:
		if a.state.Active() == "" {
			// Request, not Send: the host finds the session by its sender.
			ctx.Request(ctx.Parent(), &passivate{handled: a.handled})
		}
	case *SubmitTask:
		a.handled++
		a.submit(ctx, m)
	case *CancelTask:
		a.handled++
		a.cancel(ctx, m)
	case *ResumeSession:
		a.handled++
	case *Drain:
		a.draining, a.drainer = true, ctx.Sender()
		a.stopTimer()
		a.maybeDrained(ctx)
	case *ModelResult:
		a.onModel(ctx, m)
		a.maybeDrained(ctx)
	case *ToolResult:
		a.onTool(ctx, m)
		a.maybeDrained(ctx)
	case *deadlineTick:
		a.step(ctx, nil)
	}
}

func (a *SessionActor) ioCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.deps.IOTimeout)
}

// recover folds the session's events and re-issues unanswered effects.
func (a *SessionActor) recover(ctx actor.Context) {
	a.state = NewSessionState(a.id)
	a.inflight = map[string]bool{}
	a.queue = nil
	a.modelKey = ""
	c, cancel := a.ioCtx()
	events, err := a.deps.Store.Read(c, a.id, 1)
	cancel()
	if err != nil {
		// Escalate: the supervisor restarts the actor, which reads again.
		panic(fmt.Errorf("session %s: read events: %w", a.id, err))
	}
	for _, e := range events {
		if err := a.state.Apply(e); err != nil {
			panic(fmt.Errorf("session %s: fold: %w", a.id, err))
		}
	}
	ctx.SetReceiveTimeout(a.deps.IdleTimeout)
	if len(events) > 0 && a.state.Active() != "" {
		a.deps.Logger.Info("session recovered", "session", a.id, "events", len(events), "seq", a.state.LastSeq)
	}
	a.step(ctx, nil)
}

func (a *SessionActor) submit(ctx actor.Context, m *SubmitTask) {
	e := m.Envelope
	if a.state.Seen(e.ID) {
		ctx.Respond(&TaskAccepted{SessionID: a.id, Duplicate: true})
		return
	}
	if _, err := e.Decode(); err != nil {
		ctx.Respond(err)
		return
	}
	if e.Type != messages.TypeTaskSubmitted {
		ctx.Respond(fmt.Errorf("actors: session %s: expected %s, got %s", a.id, messages.TypeTaskSubmitted, e.Type))
		return
	}
	e.Seq = a.state.LastSeq + 1
	e.CorrelationID = e.ID
	if e.TS == 0 {
		e.TS = a.deps.Clock.Now().UnixMicro()
	}
	e.Actor = "session"
	if err := a.step(ctx, []messages.Envelope{e}); err != nil {
		ctx.Respond(err)
		return
	}
	ctx.Respond(&TaskAccepted{SessionID: a.id, Seq: e.Seq})
}

func (a *SessionActor) cancel(ctx actor.Context, m *CancelTask) {
	task := a.state.Active()
	if task == "" {
		ctx.Respond(ErrNoRunningTask)
		return
	}
	reason := m.Reason
	if reason == "" {
		reason = "cancelled by request"
	}
	e, err := a.event(&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: reason, Steps: a.state.active.Steps, Usage: a.state.active.Usage}, task, task, a.state.LastSeq+1)
	if err != nil {
		ctx.Respond(err)
		return
	}
	if err := a.step(ctx, []messages.Envelope{e}); err != nil {
		ctx.Respond(err)
		return
	}
	ctx.Respond(&TaskAccepted{SessionID: a.id, Seq: e.Seq})
}

func (a *SessionActor) onModel(ctx actor.Context, m *ModelResult) {
	if m.Key != a.modelKey {
		return // an answer to a call this incarnation did not make, or a duplicate
	}
	req, reqID, ok := a.state.PendingModel()
	if !ok || req.Key != m.Key {
		return
	}
	a.modelKey = ""
	model := m.Model
	if m.Response.Model != "" {
		model = m.Response.Model
	}
	p := &messages.ModelResponded{Key: m.Key, Model: model, Message: m.Response.Message, Usage: m.Response.Usage, LatencyUS: m.LatencyUS, Cached: m.Response.Cached}
	if m.Err != nil {
		p.Error = m.Err.Error()
	}
	e, err := a.event(p, reqID, a.state.Active(), a.state.LastSeq+1)
	if err != nil {
		panic(err)
	}
	e.Actor = "model/" + model
	a.mustStep(ctx, e)
}

func (a *SessionActor) onTool(ctx actor.Context, m *ToolResult) {
	if !a.inflight[m.Key] {
		return
	}
	delete(a.inflight, m.Key)
	for _, pc := range a.state.PendingCalls() {
		if pc.Request.Key != m.Key {
			continue
		}
		p := &messages.ToolCallCompleted{Key: m.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool, Result: m.Output, LatencyUS: m.LatencyUS}
		if m.Err != nil {
			p.Error = m.Err.Error()
		}
		e, err := a.event(p, pc.EventID, a.state.Active(), a.state.LastSeq+1)
		if err != nil {
			panic(err)
		}
		e.Actor = "tool/" + pc.Request.Tool
		a.mustStep(ctx, e)
		return
	}
	a.dispatchTools(ctx)
}

func (a *SessionActor) mustStep(ctx actor.Context, e messages.Envelope) {
	if err := a.step(ctx, []messages.Envelope{e}); err != nil {
		// The log refused the write: restart, refold and re-issue from what is durable.
		panic(fmt.Errorf("session %s: %w", a.id, err))
	}
}

func (a *SessionActor) event(p messages.Payload, cause, task string, seq uint64) (messages.Envelope, error) {
	return a.eventAt(p, cause, task, seq, a.deps.Clock.Now().UnixMicro())
}

// eventAt builds an event with the given timestamp. Decisions carry the time the agent
// decided at, so replay verification judges deadlines exactly as the live run did.
func (a *SessionActor) eventAt(p messages.Payload, cause, task string, seq uint64, ts int64) (messages.Envelope, error) {
	e, err := messages.NewEnvelope(p)
	if err != nil {
		return e, err
	}
	e.ID = effectKey(a.id, seq)
	e.SessionID = a.id
	e.Seq = seq
	e.CausationID = cause
	e.CorrelationID = task
	e.TS = ts
	e.Actor = "session"
	return e, nil
}

// step applies the given events, lets the agent decide until it waits on an effect,
// appends everything as one batch, publishes it, then issues the new effects.
func (a *SessionActor) step(ctx actor.Context, batch []messages.Envelope) error {
	// The state is updated before the batch is durable. That is safe: a write that
	// fails for good restarts the actor, which refolds from the log, so in-memory
	// state never outlives a write it does not reflect.
	for i := range batch {
		// Inputs and effect results may carry secrets; decisions are built from them.
		batch[i].Payload = a.deps.Redactor.Redact(batch[i].Payload)
		if err := a.state.Apply(batch[i]); err != nil {
			return err
		}
	}
	now := a.deps.Clock.Now().UnixMicro()
	for {
		d := a.state.Decide(a.deps.Agent, a.state.LastSeq+1, now)
		if d == nil {
			break
		}
		e, err := a.eventAt(d.Payload, d.CausationID, d.TaskID, a.state.LastSeq+1, now)
		if err != nil {
			return err
		}
		if err := a.state.Apply(e); err != nil {
			return err
		}
		batch = append(batch, e)
	}
	if len(batch) > 0 {
		a.appendDurably(batch)
		a.publish(batch)
	}
	a.issueEffects(ctx)
	return nil
}

// appendDurably writes a batch to the log. A log that is down (an outage, a full
// disk) is retried in place with backoff, for as long as it takes: nothing can go on
// before the batch is durable, and appends are idempotent on event ID, so a retry
// of a write whose outcome was unknown is safe. A batch the log refuses for its
// content, or a node that is stopping, panics instead: the supervisor restarts the
// actor, which refolds from what is durable.
func (a *SessionActor) appendDurably(batch []messages.Envelope) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		c, cancel := a.ioCtx()
		err := a.deps.Store.Append(c, batch)
		cancel()
		if err == nil {
			if attempt > 1 {
				a.deps.Logger.Info("event log write succeeded after retries", "session", a.id, "attempts", attempt)
			}
			return
		}
		if errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrInvalidEvent) {
			panic(fmt.Errorf("session %s: append %d events at seq %d: %w", a.id, len(batch), batch[0].Seq, err))
		}
		a.deps.Logger.Warn("event log write failed; retrying", "session", a.id, "seq", batch[0].Seq, "attempt", attempt, "retry_in", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-a.deps.Stopping:
			panic(fmt.Errorf("session %s: node stopping with %d events at seq %d unwritten: %w", a.id, len(batch), batch[0].Seq, err))
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// maybeDrained answers Drain once nothing is in flight, or nothing in flight matters:
// the answers to a finished (or cancelled) task are not recorded.
func (a *SessionActor) maybeDrained(ctx actor.Context) {
	idle := a.modelKey == "" && len(a.inflight) == 0
	if a.draining && a.drainer != nil && (idle || a.state.Active() == "") {
		ctx.Send(a.drainer, &Drained{})
		a.drainer = nil
	}
}

func (a *SessionActor) issueEffects(ctx actor.Context) {
	if a.draining {
		return // the session's next owner issues what is requested and unanswered
	}
	if req, _, ok := a.state.PendingModel(); ok && a.modelKey != req.Key {
		a.modelKey = req.Key
		r := a.state.Request(a.deps.Agent)
		r.Step = req.Step
		r.Scope = llm.Scope{Agent: a.deps.Agent.Name}
		ctx.Send(a.deps.Model, &ModelCall{Request: r, ReplyTo: ctx.Self(), SessionID: a.id})
	}
	a.queue = a.queue[:0]
	for _, pc := range a.state.PendingCalls() {
		if !a.inflight[pc.Request.Key] && a.deps.Agent.hasTool(pc.Request.Tool) {
			a.queue = append(a.queue, pc)
		}
	}
	a.dispatchTools(ctx)
	a.armDeadline(ctx)
}

func (a *SessionActor) dispatchTools(ctx actor.Context) {
	if a.draining {
		return
	}
	for len(a.queue) > 0 && len(a.inflight) < a.deps.MaxParallelTools {
		pc := a.queue[0]
		a.queue = a.queue[1:]
		pid, ok := a.deps.Tools[pc.Request.Tool]
		if !ok {
			continue
		}
		a.inflight[pc.Request.Key] = true
		ctx.Send(pid, &ToolCall{Request: pc.Request, ReplyTo: ctx.Self()})
	}
}

func (a *SessionActor) armDeadline(ctx actor.Context) {
	a.stopTimer()
	t := a.state.active
	if t == nil || t.Spec.DeadlineUS == 0 {
		return
	}
	wait := time.Duration(t.Spec.DeadlineUS-a.deps.Clock.Now().UnixMicro()) * time.Microsecond
	self, sys := ctx.Self(), ctx.ActorSystem()
	a.timer = time.AfterFunc(max(wait, 0), func() { sys.Root.Send(self, &deadlineTick{}) })
}

func (a *SessionActor) stopTimer() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

func (a *SessionActor) publish(batch []messages.Envelope) {
	if a.deps.Publisher == nil {
		return
	}
	msgs := make([]*message.Message, 0, len(batch))
	var results []*message.Message
	var replyTopics []string
	for _, e := range batch {
		b, err := messages.Marshal(e)
		if err != nil {
			a.deps.Logger.Error("encode event for the bus", "session", a.id, "seq", e.Seq, "err", err)
			continue
		}
		msgs = append(msgs, busMessage(e.ID, e.SessionID, e.Type, b))
		if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
			status, output, errMsg, _ := a.state.Task(e.CorrelationID)
			r, err := json.Marshal(messages.TaskResult{SessionID: a.id, Status: status, Output: output, Error: errMsg})
			if err == nil {
				results = append(results, busMessage(e.ID+"/result", a.id, "", r))
				replyTopics = append(replyTopics, a.replyTopic(e.CorrelationID))
			}
		}
	}
	// The log is the source of truth and already has these events; the bus copy feeds
	// live subscribers, so a failed publish is logged, not retried here.
	if err := a.deps.Publisher.Publish(messages.TopicEvents, msgs...); err != nil {
		a.deps.Logger.Warn("publish events", "session", a.id, "err", err)
	}
	for i, r := range results {
		if err := a.deps.Publisher.Publish(messages.TopicResults, r); err != nil {
			a.deps.Logger.Warn("publish result", "session", a.id, "err", err)
		}
		if replyTopics[i] != "" {
			if err := a.deps.Publisher.Publish(replyTopics[i], r.Copy()); err != nil {
				a.deps.Logger.Warn("publish result to reply topic", "session", a.id, "topic", replyTopics[i], "err", err)
			}
		}
	}
}

func (a *SessionActor) replyTopic(task string) string {
	for _, t := range a.state.tasks {
		if t.ID == task {
			return t.Spec.ReplyTopic
		}
	}
	return ""
}
