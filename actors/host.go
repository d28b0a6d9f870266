package actors

import (
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// SessionHost spawns one SessionActor per session on its first message, routes every
// session-addressed message to it, and stops it when it reports idle. It is the
// supervisor of the session actors: a session that panics is restarted and refolds
// its events, up to 5 times in 10 s; past that it is stopped ("given up on"), and
// the host starts it again at once to end the task it failed on, which fails with
// messages.ReasonSessionFailed; the tasks queued behind it then run (endGivenUp).
//
// The host itself is never restarted: restarting an actor stops its children, which
// would cut every session's calls in flight and leave their tasks unfinished until
// the node restarts. A failure of the host (a bug, a malformed message) is logged and
// the host resumes with its state, and so its sessions, intact; the message it failed
// on is dropped. Its props carry that policy as their guardian strategy, so spawn the
// host from the root context, never as a child.
//
// With SessionDeps.MaxLiveSessions, the host also passivates the least recently used
// idle sessions to keep within that many session actors (see there).
//
// On a sharded node (a cluster, where Kafka partitions spread sessions over nodes) the
// host runs only the sessions it owns: SetOwnership says which, and ReleaseSessions
// stops every session actor when the node's partitions are revoked.
//
// A request forwarded to a session actor that stops before handling it (released
// while busy, fenced) is answered ErrNotOwner when the actor stops, never left to
// its sender's timeout; one the actor failed on, or left when its supervisor gave up
// on it, is answered ErrSessionFailed with the failure (sessionMailbox). A Stop ends
// a write the actor retries while the log is down (SessionActor.appendDurably), so
// that stopping a session never waits for the log to recover.
type SessionHost struct {
	deps     *SessionDeps
	sessions map[string]*hosted
	byPID    map[string]string
	// idle lists the sessions that reported idle (becameIdle) and were forwarded
	// nothing since, least recently used first; only with MaxLiveSessions.
	idle list.List
	// owns reports the sessions this host may run; nil means every session.
	owns func(sessionID string) bool
	// republished are the sessions started since SetOwnership asked for
	// republishing (nil: not asked); see SetOwnership.Republish.
	republished map[string]struct{}
	// handedOver reports the sessions that need no republishing
	// (SetOwnership.HandedOver); nil: none.
	handedOver func(sessionID string) bool
	// publishedBefore reports, per session, the time before which its events need
	// no republishing (SetOwnership.PublishedBefore); nil: none.
	publishedBefore func(sessionID string) int64
	// dispatcher runs the session actors' mailboxes on long-lived goroutines.
	dispatcher actor.Dispatcher
	// stopping is set once the host stops. protoactor still hands a stopping
	// actor the user messages of its mailbox while it waits for its children to
	// stop, and a session actor spawned then is never stopped: the host would not
	// stop, and the node's Close would wait its StopTimeout out and close the log
	// under that session. A request for a session not running is answered
	// ErrNotOwner instead (answerRequest): not here, not now.
	stopping bool
	// started are the sessions the host started an actor for, up to maxStarted
	// (then it forgets them all): a new task of one of them reads the session's
	// events first rather than claim the session, which has events most likely
	// (SessionActor.claim: a claim the log refuses costs a write).
	started map[string]struct{}
	// deadLetters is the host's subscription to its system's dead letters
	// (answerDeadLetter), from its start to its stop.
	deadLetters *eventstream.Subscription
}

// ErrNotOwner answers a message for a session this node does not own (its partition
// belongs to another node, or is being moved).
var ErrNotOwner = errors.New("actors: this node does not own the session")

// SetOwnership tells a SessionHost which sessions it may run from now on; nil Owns
// means every session. The reply is nil.
type SetOwnership struct {
	Owns func(sessionID string) bool
	// Republish makes each session the host starts from now on publish its latest
	// task's events again, once, as it folds them (SessionActor.recover): the node
	// takes over partitions whose previous owner may have appended events it never
	// published (it was killed between the append and the publish, or fenced after
	// its write landed), and the log is the only place left that has them. The bus
	// copy is at least once: consumers skip events by ID, as for any redelivery.
	Republish bool
	// HandedOver, when set, reports the sessions Republish leaves out: those of
	// partitions their previous owner handed over cleanly, having published all it
	// appended (eventlog.Releasing).
	HandedOver func(sessionID string) bool
	// PublishedBefore, when set, reports for a session the time (Unix
	// microseconds, 0 for none) before which the previous owner of its partition
	// published every event it appended (eventlog.Releasing.MarkPublished): a
	// session Republish starts publishes nothing again if none of its events is
	// stamped at or after it.
	PublishedBefore func(sessionID string) int64
}

// maxRepublished bounds the sessions a host remembers having republished since its
// last SetOwnership; past it, it forgets them (a session started again then
// republishes again: a duplicate, never a loss).
const maxRepublished = 100_000

// maxStarted bounds the sessions a host remembers having started (SessionHost.started).
const maxStarted = 100_000

// ReleaseSessions hands every session actor over to the caller and makes the host own
// nothing until the next SetOwnership: the host forwards nothing to them any more. The
// reply is a []*actor.PID; the caller drains each (Drain) and stops it.
type ReleaseSessions struct{}

type hosted struct {
	id        string
	pid       *actor.PID
	forwarded int
	// idle is the session's place in SessionHost.idle; nil when it is busy.
	idle *list.Element
	// shared is what the actor's incarnations share, and mailbox the actor's
	// mailbox (sessionMailbox), made with it (one allocation for all three).
	shared  incarnations
	mailbox stoppedAnswering
}

// NewSessionHostProps returns the props of a SessionHost, to spawn from the root
// context (see SessionHost about its supervision).
func NewSessionHostProps(deps SessionDeps) *actor.Props {
	deps.withDefaults()
	d := &deps
	logger := d.Logger
	resume := func(reason any) actor.Directive {
		logger.Error("session host failed on a message; it goes on with its sessions and drops that message", slog.Any("reason", reason))
		return actor.ResumeDirective
	}
	// Shared by the host's incarnations, as its sessions are.
	mailboxes := dispatcher{w: newWorkers(sessionWorkers, workerIdle), throughput: mailboxThroughput}
	return actor.PropsFromProducer(func() actor.Actor {
		return &SessionHost{deps: d, sessions: map[string]*hosted{}, byPID: map[string]string{}, dispatcher: mailboxes, started: map[string]struct{}{}}
	},
		actor.WithSupervisor(actor.NewOneForOneStrategy(5, 10*time.Second, actor.DefaultDecider)),
		actor.WithGuardian(actor.NewOneForOneStrategy(0, 0, resume)),
		// Every task passes through the host: its mailbox is a session's queue, run
		// on the sessions' workers.
		actor.WithMailbox(func() actor.Mailbox { return &sessionQueue{} }),
		actor.WithDispatcher(mailboxes))
}

// Bounds of the goroutines kept to run session actors' mailboxes and effects
// (workers): past them, goroutines are made as needed. mailboxThroughput is
// protoactor's default number of messages a mailbox handles before it yields.
const (
	sessionWorkers    = 256
	effectWorkers     = 128
	workerIdle        = 10 * time.Second
	mailboxThroughput = 300
)

// CountSessions asks a SessionHost how many session actors are alive; the reply is an int.
type CountSessions struct{}

// Receive implements actor.Actor.
func (h *SessionHost) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		h.deadLetters = ctx.ActorSystem().EventStream.Subscribe(answerDeadLetter)
	case *actor.Stopping:
		h.stopping = true
	case *actor.Stopped:
		ctx.ActorSystem().EventStream.Unsubscribe(h.deadLetters)
	case *CountSessions:
		ctx.Respond(len(h.sessions))
	case *SetOwnership:
		h.owns = m.Owns
		h.republished, h.handedOver, h.publishedBefore = nil, m.HandedOver, m.PublishedBefore
		if m.Republish {
			h.republished = map[string]struct{}{}
		}
		ctx.Respond(nil)
	case *ReleaseSessions:
		h.owns = func(string) bool { return false }
		pids := make([]*actor.PID, 0, len(h.sessions))
		for _, s := range h.sessions {
			pids = append(pids, s.pid)
			h.remove(s)
		}
		ctx.Respond(pids)
	case *SubmitTask:
		if id := m.Envelope.SessionID; h.owns != nil && !h.owns(id) {
			m.answer(ctx, fmt.Errorf("%w: session %s", ErrNotOwner, id))
			return
		}
		// A task's session, if it is not running, need not read its log before the
		// task (SessionActor.claim): with a store that claims sessions, any task,
		// on any node (a session that turns out to have events reads them then,
		// and republishes them if asked); with one that does not, only a new task
		// (SubmitTask.New) on a node that runs every session (the log fences none
		// of its appends) and republishes nothing.
		_, again := h.started[m.Envelope.SessionID]
		h.forwardNew(ctx, m.Envelope.SessionID, !again && (h.deps.claims != nil || (m.New && h.owns == nil && h.republished == nil)))
	case *CancelTask:
		if h.refuse(ctx, m.SessionID) {
			return
		}
		h.forward(ctx, m.SessionID)
	case *ResolveApproval:
		if h.refuse(ctx, m.SessionID) {
			return
		}
		h.forward(ctx, m.SessionID)
	case *LateAnswer:
		if h.refuse(ctx, m.SessionID) {
			return
		}
		h.forward(ctx, m.SessionID)
	case *ResumeSession:
		if h.owns != nil && !h.owns(m.SessionID) {
			if ctx.Sender() != nil {
				ctx.Respond(&SessionResumed{SessionID: m.SessionID})
			}
			return
		}
		h.forward(ctx, m.SessionID)
	case *passivate:
		// Stop the session unless it is a stale incarnation or the host forwarded it
		// messages it has not handled yet (it then reports idle again later).
		s, ok := h.sessions[m.session]
		if !ok || !s.pid.Equal(m.pid) || s.forwarded != m.handled {
			return
		}
		h.remove(s)
		ctx.Stop(s.pid)
		h.deps.Logger.Debug("session passivated", "session", m.session)
	case *becameIdle:
		// As for passivate: a stale report, or one overtaken by a forwarded message,
		// says nothing.
		s, ok := h.sessions[m.session]
		if !ok || !s.pid.Equal(m.pid) || s.forwarded != m.handled {
			return
		}
		if s.idle != nil {
			h.idle.MoveToBack(s.idle)
		} else {
			s.idle = h.idle.PushBack(s)
		}
		h.makeRoom(ctx, 0)
	case *actor.Terminated:
		if id, ok := h.byPID[m.Who.Id]; ok {
			s := h.sessions[id]
			h.remove(s)
			h.endGivenUp(ctx, s)
		}
		releaseStoppedChildren(ctx)
	}
}

// endGivenUp starts again, at once, a session whose actor its supervisor gave up
// on (stopped after repeated failures: givenUp), so that the task it failed on
// ends now (SessionActor.endGivenUp: task.failed, messages.ReasonSessionFailed)
// rather than sit running, its waiters answered by nothing, until another message
// for the session starts it; the tasks queued behind it then run. A session the
// host stopped itself (passivated, released, the host stopping) was removed
// before its stop, and one the host no longer owns is the next owner's to fold.
//
// An actor started so that is given up on before it ended the task (its log
// cannot be read, or refuses the task's end as it refused the rest) is not
// started again: its next message starts it, as before. Nor is one that found no
// task to end (the failure was on a new task that is not the running one, or on
// a late answer of a task that had ended, which the node sends again each time
// the session folds its log) when the start before it found none either. So at
// most two starts in a row end nothing, and the host never loops on a session
// that fails.
func (h *SessionHost) endGivenUp(ctx actor.Context, s *hosted) {
	g := s.shared.gaveUp.Load()
	if g == nil || h.stopping || (h.owns != nil && !h.owns(s.id)) {
		return
	}
	if e := s.shared.end; e != nil && !e.ended.Load() && (!e.done.Load() || e.afterNone) {
		// Started to end a task, it could not (its log cannot be read, or refuses
		// the task's end too), or it found none to end, as the start before it:
		// started again, it would most likely do so again, at once.
		h.deps.Logger.Error("a session's task could not be ended after its actor failed repeatedly: started again to end it, the session was given up on again having ended none; its next message starts it again",
			"session", s.id, "last_failure", failureText(h.deps.Redactor, g.failure, 300))
		return
	}
	if e := s.shared.end; e != nil && !e.ended.Load() {
		g.afterNone = true
	}
	h.spawn(ctx, s.id, false, g)
}

// answerDeadLetter answers a SubmitTask with Done or Reply that reached the dead
// letters with ErrNotOwner, which the node retries: the host forwarded it to a
// session actor that had stopped on its own (its supervisor gave up on it) before
// the host handled its Terminated, and the next try starts the session again. The
// dead letters answer a request with a sender (DeadLetterResponse), but not one
// with Done or Reply, whose submitter waited for its SubmitTimeout. Each has room
// for one answer, and several hosts of one system may see the event: the first
// answers.
func answerDeadLetter(evt any) {
	d, ok := evt.(*actor.DeadLetterEvent)
	if !ok {
		return
	}
	if m, ok := d.Message.(*SubmitTask); ok && (m.Done != nil || m.Reply != nil) {
		m.hand(fmt.Errorf("%w: session %s: its actor had stopped before the task %s reached it", ErrNotOwner, m.Envelope.SessionID, m.Envelope.ID))
	}
}

// remove forgets a session actor (passivated, stopped or handed over).
func (h *SessionHost) remove(s *hosted) {
	delete(h.sessions, s.id)
	delete(h.byPID, s.pid.Id)
	if s.idle != nil {
		h.idle.Remove(s.idle)
		s.idle = nil
	}
}

// makeRoom passivates the least recently used idle sessions until the live ones and
// the adding about to start are within MaxLiveSessions. Busy sessions are never
// passivated: a session added while every live one is busy still starts, and
// OnSessionsOverLimit says so.
func (h *SessionHost) makeRoom(ctx actor.Context, adding int) {
	limit := h.deps.MaxLiveSessions
	if limit <= 0 {
		return
	}
	for len(h.sessions)+adding > limit && h.idle.Len() > 0 {
		s := h.idle.Front().Value.(*hosted)
		h.remove(s)
		ctx.Stop(s.pid)
		h.deps.OnSessionEvicted()
		h.deps.Logger.Debug("session passivated to make room", "session", s.id, "max_live_sessions", limit)
	}
	if adding > 0 && len(h.sessions)+adding > limit {
		h.deps.OnSessionsOverLimit()
	}
}

// releaseStoppedChildren clears what protoactor's set of an actor's children still
// holds past its length. Its Remove moves the last child into the hole and shortens
// the slice without clearing the vacated slot, so the backing array keeps PIDs of
// stopped children; a PID caches its process, which reaches the mailbox, the context,
// the actor and its folded state. A host would otherwise keep up to as many stopped
// sessions alive as it ever ran at once. Children returns that slice itself (were
// it a copy, this would clear the copy and change nothing).
//
// Only the slots from the length up to the first nil one are cleared: slots go
// stale only as the length shrinks (a Remove, one slot per Terminated; a Clear,
// all of them), so the stale ones follow the length and every slot past them was
// cleared before. Clearing the whole tail cost, on each Terminated, as much as
// the most children the host ever had less those it has now.
func releaseStoppedChildren(ctx actor.Context) {
	c := ctx.Children()
	tail := c[len(c):cap(c)]
	for i := range tail {
		if tail[i] == nil {
			return
		}
		tail[i] = nil
	}
}

// refuse answers ErrNotOwner for a session this host does not own.
func (h *SessionHost) refuse(ctx actor.Context, id string) bool {
	if h.owns == nil || h.owns(id) {
		return false
	}
	ctx.Respond(fmt.Errorf("%w: session %s", ErrNotOwner, id))
	return true
}

func (h *SessionHost) forward(ctx actor.Context, id string) { h.forwardNew(ctx, id, false) }

// forwardNew forwards the message to the session's actor, spawning it if it is not
// running; unread spawns it without reading its log (SessionActor.unread), a
// restarted incarnation reads it.
func (h *SessionHost) forwardNew(ctx actor.Context, id string, unread bool) {
	s, ok := h.sessions[id]
	if !ok && h.stopping {
		answerRequest(ctx.ActorSystem(), ctx.Message(), ctx.Sender(), fmt.Errorf("%w: the node is stopping: session %s not started", ErrNotOwner, id), true)
		return
	}
	if !ok {
		s = h.spawn(ctx, id, unread, nil)
	} else if s.idle != nil {
		// Busy until it reports idle again.
		h.idle.Remove(s.idle)
		s.idle = nil
	}
	s.forwarded++
	ctx.Forward(s.pid)
}

// spawn starts session id's actor; unread spawns it without reading its log
// (SessionActor.unread), a restarted incarnation reads it. end, when set, is the
// failure of the session's previous actor, which its supervisor gave up on: the
// new actor ends the task that actor failed on first (endGivenUp).
func (h *SessionHost) spawn(ctx actor.Context, id string, unread bool, end *givenUp) *hosted {
	h.makeRoom(ctx, 1)
	s := &hosted{id: id}
	s.shared.end = end
	deps, shared := h.deps, &s.shared
	republish, publishedBefore := false, int64(0)
	if h.republished != nil && (h.handedOver == nil || !h.handedOver(id)) {
		if h.publishedBefore != nil {
			publishedBefore = h.publishedBefore(id)
		}
		if _, done := h.republished[id]; !done {
			if len(h.republished) >= maxRepublished {
				clear(h.republished)
			}
			h.republished[id], republish = struct{}{}, true
		}
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		a := newSessionActor(id, deps, shared)
		a.republish = republish // a restarted incarnation publishes again: duplicates only
		a.publishedBefore = publishedBefore
		a.unread, unread = unread, false
		if deps.spawned != nil {
			deps.spawned(a)
		}
		return a
	}, actor.WithDispatcher(h.dispatcher), actor.WithMailbox(s.sessionMailbox(ctx.ActorSystem())))
	pid := ctx.Spawn(props)
	if len(h.started) >= maxStarted {
		clear(h.started)
	}
	h.started[id] = struct{}{}
	s.pid = pid
	h.sessions[id] = s
	h.byPID[pid.Id] = id
	return s
}

// sessionMailbox returns the mailbox of session s's actor: protoactor's unbounded
// one (sessionQueue), seeing the actor's lifecycle (stoppedAnswering):
//
//   - A Stop posted to the actor ends stop, which ends a write the actor retries in
//     place (SessionActor.appendDurably: a log that keeps failing) or a retry's
//     attempt, so that the actor handles the Stop next instead of after the log
//     recovered: a node whose partitions are revoked (Revoked) or that closes does not
//     wait on such a session, nor do the requests queued behind its write.
//   - The requests left in the mailbox once the actor stopped are answered at once
//     (answerRequest). protoactor drops those without a word: the actor's context
//     ignores user messages once stopped, and a mailbox whose actor failed stays
//     suspended when its supervisor stops it rather than restart it; only a message
//     sent after the actor's process is gone reaches the dead letters, which answer a
//     request (DeadLetterResponse). A request among them would wait for its timeout:
//     a SubmitTask the tasks handler forwarded to a session that was busy (a slow
//     append) past Config.HandoffGrace when the node's partitions were revoked kept
//     the handler, and so the order of the session's messages, waiting for
//     SubmitTimeout.
//   - The request the actor failed on (it panicked) is answered ErrSessionFailed as
//     the failure reaches the supervisor: the actor answers it no more, whether it is
//     restarted or stopped.
//
// The mailbox is s.mailbox: the props it is given to spawn the actor once, and
// protoactor makes a mailbox once per spawn (restarts keep it).
func (s *hosted) sessionMailbox(system *actor.ActorSystem) actor.MailboxProducer {
	s.mailbox = stoppedAnswering{system: system, session: s.id, stop: &s.shared.stop, gaveUp: &s.shared.gaveUp}
	return func() actor.Mailbox { return &s.mailbox }
}

// stoppedAnswering is a session actor's mailbox (sessionMailbox). It is also the
// MessageInvoker the mailbox calls, in front of the actor's context; a mailbox
// invokes one message at a time, so stopped and failure need no lock.
type stoppedAnswering struct {
	sessionQueue
	actor.MessageInvoker
	system  *actor.ActorSystem
	session string
	// stop is the actor's (SessionActor.stop), ended by a Stop posted to it.
	stop *stopSignal
	// stopped is set once the actor handled a Stop: it handles no user message
	// after it (a session actor has no children, so a Stop ends it at once).
	stopped bool
	// failure is why the actor failed last, until its supervisor restarts it; a Stop
	// that finds it set is the supervisor giving up on the actor (or a stop that came
	// while it failed): the requests left are answered ErrSessionFailed with it.
	failure any
	// failedOnTask is the ID of the task a SubmitTask that the actor failed on
	// last brought; "" when it failed on anything else.
	failedOnTask string
	// failedOnEnded is set when the actor failed last on a message for a task
	// that had ended (a LateAnswer): no running task's.
	failedOnEnded bool
	// gaveUp is the actor's (incarnations.gaveUp), set when its supervisor stops
	// it after repeated failures.
	gaveUp *atomic.Pointer[givenUp]
}

// RegisterHandlers implements actor.Mailbox: the mailbox invokes m, which invokes
// the actor's context.
func (m *stoppedAnswering) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.MessageInvoker = invoker
	m.sessionQueue.RegisterHandlers(m, dispatcher)
}

// PostSystemMessage implements actor.Mailbox: a Stop ends what the actor waits on
// first (its stop), on the poster's goroutine, since the actor's may be busy.
func (m *stoppedAnswering) PostSystemMessage(msg any) {
	if _, ok := msg.(*actor.Stop); ok {
		m.stop.end()
	}
	m.sessionQueue.PostSystemMessage(msg)
}

// InvokeSystemMessage implements actor.MessageInvoker.
func (m *stoppedAnswering) InvokeSystemMessage(msg any) {
	if _, ok := msg.(*actor.Restart); ok {
		m.failure = nil // a restart that fails again sets it again (EscalateFailure)
	}
	_, stop := msg.(*actor.Stop)
	if stop && !m.stopped && m.failure != nil {
		// Before the Stop is handled: handling it tells the host that the actor
		// stopped (Terminated), and the host reads this as it learns it
		// (SessionHost.endGivenUp), maybe before the Stop's handling returns.
		m.gaveUp.Store(&givenUp{failure: m.failure, task: m.failedOnTask, noTask: m.failedOnEnded})
	}
	m.MessageInvoker.InvokeSystemMessage(msg)
	if stop && !m.stopped {
		m.stopped = true
		if m.failure != nil {
			// The mailbox of a failed actor is suspended, and a Stop does not resume
			// it: resume it, so that the requests left reach InvokeUserMessage.
			m.sessionQueue.PostSystemMessage(&actor.ResumeMailbox{})
		}
	}
}

// InvokeUserMessage implements actor.MessageInvoker.
func (m *stoppedAnswering) InvokeUserMessage(msg any) {
	if !m.stopped {
		m.MessageInvoker.InvokeUserMessage(msg)
		return
	}
	_, body, sender := actor.UnwrapEnvelope(msg)
	var why error
	if m.failure != nil {
		why = sessionFailed(m.session, m.failure, "its supervisor stopped it after repeated failures; it starts again from its log, and the task it failed on fails")
	} else {
		why = fmt.Errorf("%w: session %s stopped before it handled the request", ErrNotOwner, m.session)
	}
	answerRequest(m.system, body, sender, why, true)
}

// EscalateFailure implements actor.MessageInvoker: the actor panicked on msg. It is
// answered ErrSessionFailed, since the actor handles it no more (its next
// incarnation, if the supervisor restarts it, starts with the next message).
func (m *stoppedAnswering) EscalateFailure(reason any, msg any) {
	m.failure = reason
	_, body, sender := actor.UnwrapEnvelope(msg)
	m.failedOnTask, m.failedOnEnded = "", false
	switch b := body.(type) {
	case *SubmitTask:
		m.failedOnTask = b.Envelope.ID
	case *LateAnswer:
		m.failedOnEnded = true
	}
	answerRequest(m.system, body, sender, sessionFailed(m.session, reason, "it failed on the request and restarts from its log"), false)
	m.MessageInvoker.EscalateFailure(reason, msg)
}

// givenUp is what a session actor's mailbox knows of the actor when its
// supervisor gives up on it (stops it after repeated failures): its last failure,
// and the task of the SubmitTask it failed on, if that is what it failed on. The
// host starts the session again with it (SessionHost.endGivenUp), and the next
// actor ends that task (SessionActor.endGivenUp), or the running one when task is
// empty and noTask is not set (then sets task to it); done is set once it did, or
// found no task to end, and ended once it ended one. Only the next actor's
// incarnations, one at a time, write task, tried and keys.
type givenUp struct {
	failure any
	task    string
	// noTask says that the failure was on a message for a task that had ended
	// (a LateAnswer): the running task, if any, did not fail.
	noTask bool
	// tried is set once an incarnation tried to record the end of task, whose
	// effects in flight were keys: an incarnation after it that finds the task
	// ended knows that the end was written.
	tried bool
	keys  []messages.EffectKey
	done  atomic.Bool
	ended atomic.Bool
	// afterNone says that the actor started to end the task before this one
	// found none to end (the host's, SessionHost.endGivenUp).
	afterNone bool
}

// failureText is a failure's text, its secrets redacted, cut to at most n bytes
// (and "…"). It is redacted before it is cut: a secret across the cut would leave
// its head, which no redaction recognizes (a known value is matched whole, a
// credential's shape has a least length).
func failureText(r *redact.Redactor, failure any, n int) string {
	s := r.String(fmt.Sprint(failure))
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// ErrSessionFailed answers a request to a session whose actor failed (panicked:
// a bug, a log that refused a batch or could not be read) before it answered: the
// request it failed on, and the requests left in its mailbox when its supervisor
// gave up on it after repeated failures (5 in 10 s). The node owns the session
// still: the session recorded nothing of the request, and a retry reaches its next
// actor, which folds the session's log again (a later message starts it). Errors
// wrapping it wrap the failure's cause too when it is an error.
var ErrSessionFailed = errors.New("actors: the session failed")

// ErrSessionPanicked marks an ErrSessionFailed whose failure is a bug rather than
// an error the session met (a log that refused a batch or could not be read): a
// runtime error (a nil dereference, an index out of range, …) or a panic with a
// value that is no error. The session's next actor folds the same log and decides
// the same way, so a retry of the request most likely meets it again.
var ErrSessionPanicked = errors.New("actors: the session's actor panicked")

// sessionFailed is ErrSessionFailed for session id, which failed with reason; also
// ErrSessionPanicked when reason is a bug's (ErrSessionPanicked).
func sessionFailed(id string, reason any, what string) error {
	err, isErr := reason.(error)
	var rt runtime.Error
	if !isErr || errors.As(err, &rt) {
		if isErr {
			return fmt.Errorf("%w (%w): session %s (%s): %w", ErrSessionFailed, ErrSessionPanicked, id, what, err)
		}
		return fmt.Errorf("%w (%w): session %s (%s): %v", ErrSessionFailed, ErrSessionPanicked, id, what, reason)
	}
	return fmt.Errorf("%w: session %s (%s): %w", ErrSessionFailed, id, what, err)
}

// answerRequest answers a request a session actor will never handle with why:
// SubmitTask, CancelTask, ResolveApproval, LateAnswer and ResumeSession. ErrNotOwner, which the node's handlers
// take for "not here, not now": once the partition moved, its next owner reads the
// message again; on this node, the retry reaches the session's next actor, which
// the host starts for it; ErrSessionFailed is retried the same way. The actor
// recorded nothing of the request, or, for a write whose outcome it could not know,
// a retry is recognized by its message ID: the retry records it once. A Drain is
// answered Drained when the actor stopped (stopped): a stopped session has nothing
// in flight. Anything else is dropped, as protoactor does.
func answerRequest(system *actor.ActorSystem, msg any, sender *actor.PID, why error, stopped bool) {
	var reply any
	switch m := msg.(type) {
	case *SubmitTask:
		err := fmt.Errorf("%w (task %s)", why, m.Envelope.ID)
		if m.hand(err) { // to Done or Reply, unless answered already
			return
		}
		reply = err
	case *CancelTask:
		reply = fmt.Errorf("%w (a cancellation)", why)
	case *ResolveApproval:
		reply = fmt.Errorf("%w (the answer to approval %s)", why, m.Call)
	case *LateAnswer:
		reply = fmt.Errorf("%w (the late answer of call %s)", why, m.Key)
	case *ResumeSession:
		reply = fmt.Errorf("%w (the resumption of session %s)", why, m.SessionID)
	case *Drain:
		if !stopped {
			return
		}
		reply = &Drained{}
	default:
		return
	}
	if sender != nil {
		system.Root.Send(sender, reply)
	}
}
