package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/deadline"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// EventStore is what a session actor needs of the event log: append its events and
// read them back. eventlog.Log satisfies it.
type EventStore interface {
	Append(ctx context.Context, events []messages.Envelope) error
	Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error)
}

// ClaimingStore is the optional capability of an EventStore to claim a session: to
// append its first batch only if the log holds no event of the session at all
// (eventlog.Claiming's Claim; on a sharded node, ClaimLeased under the lease of the
// session's partition). With it, every session that is not running starts its
// next task without reading its log first (SessionActor.claim), whatever the
// task's ID, on any node: a claim the log accepts proves the session had no
// events, and one it refuses leaves the session to read them. Wrappers of a store
// must pass it through, or sessions read their log before every first task.
type ClaimingStore interface {
	EventStore
	Claim(ctx context.Context, events []messages.Envelope) error
}

// SessionDeps are what every session actor of a node shares.
type SessionDeps struct {
	Store EventStore
	// Publisher receives every appended event on messages.TopicEvents and every task
	// result on messages.TopicResults (and on the task's reply topic). It may be nil.
	Publisher message.Publisher
	// Live, when set, is handed each batch of a session's events once it is durable,
	// before Publisher gets them: the node's live watchers, when they are in the same
	// process. It must not block, nor modify the events.
	Live func(sessionID string, events []messages.Envelope)
	// Published, when set, reports whether this process published the session's
	// events up to seq already: a session that folds its events to republish them
	// (SetOwnership.Republish) skips those (a node's partitions given back to it in
	// a rebalance).
	Published func(sessionID string, seq uint64) bool
	// OnBus, when set, reports whether the session's events up to seq were found
	// on messages.TopicEvents and the result of the task its event seq ends on
	// messages.TopicResults (a sharded node that takes partitions over reads them,
	// in its own process): a session that folds its events to republish them
	// skips those too, unless that task has a reply topic, which nobody read.
	OnBus func(sessionID string, seq uint64) bool
	// Stamping and Handed, when set, bracket each batch a session appends and
	// hands to Publisher, so that the node can tell up to when it has published
	// everything its sessions appended (the node's publication marks): Stamping
	// is called before the batch's new events are stamped, with the earliest TS
	// of those it already holds (math.MaxInt64 if none), and Handed once
	// Publisher was handed the batch, or the step appended nothing, or the log
	// refused the batch as fenced (eventlog.ErrFenced: the partition's new owner
	// publishes the session, and this actor stops). A step whose append fails
	// otherwise (the batch may be stored all the same) calls no Handed: its
	// session's next step does, and an actor stopped while it retried the write
	// (its partitions revoked, the node closing) takes none: the node reads the
	// batch as pending when it hands the partitions over. They must not block.
	Stamping func(sessionID string, earliestUS int64)
	Handed   func(sessionID string)
	// Recovered, when set, is handed a session's events each time the session folds
	// them as it starts (a node's traces resume a running task's spans from them).
	// It must not block, nor modify the events.
	Recovered func(sessionID string, events []messages.Envelope)
	// LateCalls, when set, is handed the keys of a session's delegate calls that
	// wait for their late answers (SessionState.LateCalls) each time the session
	// folds its events as it starts, when there are any: the node waits for
	// their children's ends and records them (LateAnswer). It must not block.
	LateCalls func(sessionID string, keys []string)
	// StillOwned, when set, is asked each time a session has read and folded its
	// events as it starts (load), before it does anything with them (publishes
	// them again, hands them to Recovered or LateCalls, re-issues the effects in
	// flight): once per activation, never per step. An error wrapping
	// eventlog.ErrFenced (another node took the session's partition: this node
	// hung past the group's session timeout) stops the actor as a fenced append
	// does, having issued nothing: the history it folded may be the new owner's,
	// whose effects in flight it would perform again under the same keys. Another
	// error fails the load as a failed read does.
	StillOwned func(ctx context.Context, sessionID string) error
	// Configs is where the sessions store the configurations their tasks name
	// (messages.ConfigStream: storeConfig) and read them back (loadConfigs): the
	// log itself, with no lease of a partition (a configuration's stream is no
	// session's, and every node storing it writes the same event). Nil: Store.
	Configs EventStore
	// Agent runs the tasks that name no agent (or "default"); Named, those that name
	// one of its keys (Agents.For).
	Agent Agent
	Named map[string]Agent
	// Rules is the version of the decision rules new tasks are recorded under
	// (Agents.Rules): 0, this build's.
	Rules int
	// Effects performs the session's model and tool calls.
	Effects Effects
	Clock   Clock
	// IOTimeout bounds each append and read (default 30 s); a call may be given up
	// to a sixteenth less, as calls that start close together share one deadline.
	IOTimeout time.Duration
	// MaxParallelTools bounds a session's tool calls in flight (default 4).
	MaxParallelTools int
	// IdleTimeout passivates a session with no running task (default 1 minute).
	IdleTimeout time.Duration
	// Stopping is closed when the node shuts down; it ends retries of a failing log.
	Stopping <-chan struct{}
	// Redactor removes secrets from tasks and effect results before they are applied,
	// recorded or published (default: token-shaped strings only).
	Redactor *redact.Redactor
	// Routable, when set, reports whether the node's model answers requests naming
	// the chain models (a gateway's routes). A call of a task running under its
	// recorded configuration whose model the node has no route to is performed with
	// the node's own model instead (Agent.recordedModel). Nil: every chain.
	Routable func(models []string) bool
	Logger   *slog.Logger
	// MaxLiveSessions bounds the session actors alive at once (0: no bound). When a
	// new session would pass it, or an idle one reports while it is passed, the host
	// passivates the least recently used idle sessions (no running task, no effect in
	// flight), as the idle timeout would; never a busy one. With every session busy a
	// new one starts anyway: the bound is soft.
	MaxLiveSessions int
	// MaxQueuedTasks bounds the tasks that wait their turn behind a session's
	// running one (0: no bound): a new task past it is refused (ErrQueueFull)
	// and nothing is recorded; a task recorded before (its ID seen) is still
	// answered as such.
	MaxQueuedTasks int
	// OnSessionEvicted is called for each idle session passivated to keep within
	// MaxLiveSessions; OnSessionsOverLimit for each session started past it because
	// the others were busy (nil: none).
	OnSessionEvicted, OnSessionsOverLimit func()
	// LogWrites, when set, hears how the sessions' log writes go, so that an outage
	// of the log (a full disk) is told once for the node, as it starts and as it
	// ends, rather than by every session at every attempt: each attempt that failed
	// with an error the session retries (retried) or gives up on (a new task a full
	// log refused), and each write that went through (err nil) after attempt
	// attempts. It must be cheap: every append calls it. The sessions then log each
	// failed attempt at debug level; without LogWrites, as a warning.
	LogWrites func(attempt int, err error, retried bool)
	// SnapshotAfter is how many events a session stopping idle (passivated, or its
	// node closing) must have folded beyond its fold snapshot, or from its start,
	// to save a new one when the log keeps them (Snapshots): the next activation
	// folds the events after it instead of the whole history. Default 256;
	// negative: never.
	SnapshotAfter int
	// Snapshots, when set, keeps the sessions' fold snapshots; nil: Store, if it
	// keeps them (eventlog.Snapshots). Wrappers of a log, such as a node's, pass
	// the log itself here.
	Snapshots eventlog.Snapshots

	// spawned, when set (by a test), sees each session actor the host creates.
	spawned func(*SessionActor)
	// io bounds appends and reads by IOTimeout.
	io *deadline.Shared
	// actors names the models and tools that answer events.
	actors *actorNames
	// claims is Store if it claims sessions (ClaimingStore), else nil.
	claims ClaimingStore
	// agents are Agent and Named, made once for the session states to share;
	// live, the digests of their configurations (liveConfigs).
	agents *Agents
	live   map[string]bool
	// stored are the configurations the sessions stored (storeConfig).
	stored *storedConfigs
	// snapshotKey is the key of the sessions' fold snapshots (nil when they save
	// and use none).
	snapshotKey func() foldKey
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
		d.Redactor = redact.New()
	}
	if d.OnSessionEvicted == nil {
		d.OnSessionEvicted = func() {}
	}
	if d.OnSessionsOverLimit == nil {
		d.OnSessionsOverLimit = func() {}
	}
	d.io = deadline.New(d.IOTimeout)
	d.claims, _ = d.Store.(ClaimingStore)
	d.actors = &actorNames{}
	as := Agents{Default: d.Agent, Named: d.Named, Rules: d.Rules}.withDigests() // once for the node's sessions
	d.agents = &as
	if d.Configs == nil {
		d.Configs = d.Store
	}
	d.live = liveConfigs(d.agents)
	d.stored = &storedConfigs{}
	if d.SnapshotAfter == 0 {
		d.SnapshotAfter = 256
	}
	if d.Snapshots == nil {
		d.Snapshots, _ = d.Store.(eventlog.Snapshots)
	}
	if d.Snapshots != nil && d.SnapshotAfter > 0 {
		agents := d.agents
		d.snapshotKey = sync.OnceValue(func() foldKey { return snapshotKey(agents) })
	}
}

// SubmitTask asks a session to run a task. The reply is a *TaskAccepted or an error,
// sent to the sender, or to Done or Reply when one is set.
type SubmitTask struct {
	Envelope messages.Envelope
	// Task, when set, is Envelope's payload decoded, as the sender made it (the
	// node's ingress): the session takes it instead of decoding the payload again.
	// It must be what Envelope.Payload encodes, and the sender must not use it
	// afterwards (the session may change it). Nil: the session decodes the payload.
	Task *messages.TaskSubmitted
	// Done, when set, receives the answer instead of the sender: nil once the task is
	// durably recorded (or was before), else the error it was refused with. It must
	// have room for it: the session does not wait.
	Done chan<- error
	// Reply, when set (and Done is not), receives the answer instead of the sender:
	// the *TaskAccepted (Duplicate says whether the task was recorded before) or the
	// error. It must have room for it: the session does not wait. A sender that
	// needs the answer whole takes it there rather than through a future, which
	// registers a process and a timer for each task.
	Reply chan<- any
	// New says that Envelope.ID was made for this submission by an ID source that
	// never makes the same ID twice (UniqueIDs), so that no log holds it yet. A
	// session that is not running then starts without reading its log (see
	// SessionActor.claim), on a node that runs every session and republishes
	// nothing, when the store cannot claim (ClaimingStore). With a store that can,
	// every task of a session that is not running starts that way, New or not. The
	// host claims no session it ran before (whose log most likely has events).
	New bool
}

// answer answers m: res is a *TaskAccepted or an error.
func (m *SubmitTask) answer(ctx actor.Context, res any) {
	if !m.hand(res) {
		ctx.Respond(res)
	}
}

// hand gives res, a *TaskAccepted or an error, to Done or Reply, and reports
// whether m has either (false: the sender is answered). Each has room for one
// answer: one that holds an answer already keeps it.
func (m *SubmitTask) hand(res any) bool {
	switch {
	case m.Done != nil:
		err, _ := res.(error)
		select {
		case m.Done <- err:
		default:
		}
	case m.Reply != nil:
		select {
		case m.Reply <- res:
		default:
		}
	default:
		return false
	}
	return true
}

// TaskAccepted answers SubmitTask once the task is durably recorded.
type TaskAccepted struct {
	SessionID string
	Seq       uint64
	// Duplicate is true when the task's message ID had been recorded before.
	Duplicate bool
}

// CancelTask stops a session's running task; the reply is a *TaskAccepted for the
// cancellation event or an error (ErrNoRunningTask when the session is idle, or
// when TaskID names a task that neither runs nor waits its turn: one that ended).
// TaskID, when given, is the task to cancel, by its name (SessionState.TaskName)
// or its ID: a cancellation delivered again after its task ended must not cancel
// the task that runs next. A task TaskID names while it waits its turn behind
// the running one fails cancelled where it waits, and the running one goes on;
// under decision rules older than 10 it is not cancelled (SessionState.QueuedTask).
type CancelTask struct {
	SessionID string
	TaskID    string
	Reason    string
}

// ResolveApproval answers the approval of a call of a session's running task
// (approvals.go). Call is the call's call_id or key; By says where the answer came
// from (messages.ApprovedByHTTP, …). The reply is a *TaskAccepted once the answer is
// recorded (Duplicate when the same answer was recorded before: nothing is recorded
// again), or an error wrapping ErrApprovalNotPending.
type ResolveApproval struct {
	SessionID string
	Call      string
	Approve   bool
	Reason    string
	By        string
}

// ResumeSession wakes a session so it folds its events and continues unfinished work
// (a session already awake decides again: an approval that expired meanwhile is
// rejected). Sent as a request, it is answered *SessionResumed once the session
// read its log and decided (or at once, by the host, when the node does not own the
// session), or an error: a node resuming many sessions waits for the answers, so as
// to read a few sessions' logs at a time.
type ResumeSession struct {
	SessionID string
}

// SessionResumed answers a ResumeSession sent as a request.
type SessionResumed struct {
	SessionID string
}

// ErrQueueFull answers SubmitTask of a new task when SessionDeps.MaxQueuedTasks
// tasks wait their turn in its session already: nothing is recorded, and the
// task may be sent again once some have run.
var ErrQueueFull = errors.New("actors: too many tasks wait their turn in the session")

// ErrNoRunningTask answers CancelTask on an idle session.
var ErrNoRunningTask = errors.New("actors: the session has no running task")

// ErrTaskCancelled answers CancelTask naming a task that ended cancelled: a
// cancellation sent again after its answer was lost. It is an ErrNoRunningTask
// (nothing is recorded), which a caller that named the task may answer as it
// answered the first.
var ErrTaskCancelled = fmt.Errorf("%w: the task was cancelled", ErrNoRunningTask)

// Drain asks a session to issue no more effects and to answer with *Drained once none
// of its effects is in flight: results that arrive meanwhile are recorded, and effects
// decided meanwhile are recorded as requested, for the session's next owner to issue.
// A node hands its sessions over this way when Kafka moves their partitions, and when
// it closes, so that tool calls in flight finish and are recorded instead of being
// performed again.
type Drain struct{}

// Drained answers Drain.
type Drained struct{}

// deadlineTick wakes a session to check its running task's deadline.
type deadlineTick struct{}

// idleTimeout tells a session that it handled no message for SessionDeps.IdleTimeout.
type idleTimeout struct{}

// passivate is sent by a session to its host when it has been idle: the session's ID
// and PID name the sender (it is sent with Send, so the host sees no Sender), and
// handled is the number of host-forwarded messages it has processed.
type passivate struct {
	session string
	pid     *actor.PID
	handled int
}

// becameIdle is sent by a session to a host that bounds its sessions
// (MaxLiveSessions) whenever the session has no running task and no effect in flight
// after handling handled host-forwarded messages: the host may passivate it to make
// room. Its fields are passivate's.
type becameIdle passivate

// SessionActor owns one session: it is the only writer of the session's events.
type SessionActor struct {
	id    string
	deps  *SessionDeps
	state *SessionState
	// publishedBefore is the time before which the session's events were all
	// published by its partition's previous owner (SetOwnership.PublishedBefore):
	// recover republishes nothing of a session whose events are all older.
	publishedBefore int64
	// snapSeq is the seq of the session's fold snapshot, as far as this
	// incarnation knows.
	snapSeq uint64
	// unstored is the new task that step records, while submit or claim steps it:
	// step stores the configuration it names first (storeConfig).
	unstored messages.Payload
	// The flags below are kept together, in one word (the actor fits a smaller
	// size class).
	//
	// republish makes recover publish the session's latest task's events again
	// (SetOwnership.Republish).
	republish bool
	// unread is set while the session has not read its log: it was started for a
	// task (SubmitTask.New, or any with a ClaimingStore), and its state is that of a
	// session with no events until claim proves it or the log refuses the claim.
	unread bool
	// claiming is set while claim appends: a batch the log refuses with
	// ErrSeqConflict is then returned by step instead of restarting the actor.
	// claimRetried is set when such a batch was refused after an attempt whose
	// outcome was unknown, which may have written it (see claim).
	claiming, claimRetried bool
	// undurable is set while the state may hold events the log does not (a step
	// or a load that has not ended well): such a state saves no fold snapshot.
	undurable bool
	// storingConfig is set while storeConfig appends: a configuration's stream
	// that holds another event at its position is left as it is.
	storingConfig bool
	// newTask is set while an idle session (no task running, no effect in flight)
	// appends the batch that records a new task: a log that is full (eventlog.ErrFull)
	// at the first attempt then refuses the task (errNotRecorded) instead of having
	// the write retried in place, so that the submitter learns at once that it was
	// not recorded, and it is not recorded later behind the submitter's back.
	newTask bool
	// handled counts the host-forwarded messages the session processed; its
	// incarnations share it, so that after a restart it still matches what the host
	// forwarded, and the session can passivate.
	handled *int
	// idleAt is the value of *handled the session last reported idle at (becameIdle);
	// -1 when it has been busy since.
	idleAt int
	// inflight are the keys of the dispatched, unanswered tool calls; queue holds
	// the rest.
	inflight keySet
	queue    []PendingCall
	modelKey messages.EffectKey
	// reply hands an effect's reply to this actor (Effects.Perform).
	reply func(messages.EffectReply)
	// idle sends idleTimeout once no message came for IdleTimeout; deadline sends
	// deadlineTick when the running task's deadline passes. Neither is protoactor's
	// receive timeout nor a plain timer: see wakeup and idleWakeup.
	idle     *idleWakeup
	deadline *wakeup
	// drain is set by Drain (on) with the PID that waits for Drained (drainer); the
	// incarnations share it, so that one restarted after a failure while the session
	// drained (a result the log refused) still issues nothing and answers the Drain.
	drain *drainState
	// stop ends once the actor is asked to stop (sessionMailbox); its incarnations
	// share it. It ends a write retried in place (appendDurably).
	stop *stopSignal
	// end, when set, is the failure of the session's previous actor, which its
	// supervisor gave up on: load ends the task it failed on first (endGivenUp),
	// once for all the incarnations, which share it.
	end *givenUp
}

var _ actor.Actor = (*SessionActor)(nil)

func newSessionActor(id string, deps *SessionDeps, shared *incarnations) *SessionActor {
	return &SessionActor{id: id, deps: deps, handled: &shared.handled, drain: &shared.drain, idleAt: -1, stop: &shared.stop, end: shared.end}
}

// stopSignal says that a session actor was asked to stop (SessionActor.stop): end
// ends it, on any goroutine, any number of times. Its context is made when first
// asked for (a write retried), not for each session.
type stopSignal struct {
	mu     sync.Mutex
	ended  bool
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns a context that ends once the signal does.
func (s *stopSignal) context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		if s.ended {
			s.cancel()
		}
	}
	return s.ctx
}

// end ends the signal.
func (s *stopSignal) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.cancel != nil {
		s.cancel()
	}
}

// incarnations is what the incarnations of one session actor share (a restart
// makes a new SessionActor): SessionActor.handled, SessionActor.drain,
// SessionActor.stop and SessionActor.end.
type incarnations struct {
	handled int
	drain   drainState
	stop    stopSignal
	// gaveUp is set by the actor's mailbox when its supervisor gives up on it
	// (stops it after repeated failures), for its host (SessionHost.endGivenUp).
	gaveUp atomic.Pointer[givenUp]
	// end is what the session's previous actor, given up on, failed with: the
	// actor ends the task it failed on before anything else (endGivenUp).
	end *givenUp
}

// drainState is SessionActor.drain.
type drainState struct {
	on      bool
	drainer *actor.PID
}

// Receive implements actor.Actor.
func (a *SessionActor) Receive(ctx actor.Context) {
	// The idle timeout counts from the end of the last message handled.
	a.idle.handling()
	if a.unread {
		switch m := ctx.Message().(type) {
		case *CancelTask, *ResolveApproval, *LateAnswer, *ResumeSession, *Drain, *messages.EffectReply, *deadlineTick, *idleTimeout:
			// Only a new task is handled before the session read its log. A load
			// that stopped the actor answers the request it was for as the
			// requests behind it are (sessionMailbox): not here, retry.
			if err := a.mustLoad(ctx); err != nil {
				answerRequest(ctx.ActorSystem(), m, ctx.Sender(), err, true)
				return
			}
		}
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.recover(ctx)
		a.maybeDrained(ctx) // an incarnation restarted while the session drained
	case *actor.Restarting, *actor.Stopping:
		a.stopTimer()
		a.idle.stop()
		if _, ok := m.(*actor.Stopping); ok {
			a.saveSnapshot()
		}
	case *idleTimeout:
		// The timeout is armed again below: a session that was idle-timed while busy
		// (a long call) or whose host kept it (a message in flight) passivates later.
		if a.state.Active() == "" {
			ctx.Send(ctx.Parent(), &passivate{session: a.id, pid: ctx.Self(), handled: *a.handled})
		}
	case *SubmitTask:
		*a.handled++
		a.submit(ctx, m)
	case *CancelTask:
		*a.handled++
		a.cancel(ctx, m)
	case *ResumeSession:
		*a.handled++
		if !a.drain.on {
			a.step(ctx, nil)
		}
		if ctx.Sender() != nil {
			ctx.Respond(&SessionResumed{SessionID: m.SessionID})
		}
	case *ResolveApproval:
		*a.handled++
		a.resolveApproval(ctx, m)
	case *LateAnswer:
		*a.handled++
		a.lateAnswer(ctx, m)
	case *Drain:
		a.drain.on, a.drain.drainer = true, ctx.Sender()
		a.stopTimer()
		a.maybeDrained(ctx)
	case *messages.EffectReply:
		switch {
		case !a.modelKey.IsZero() && m.Key == a.modelKey:
			a.onModel(ctx, m)
		case a.inflight.has(m.Key):
			a.onTool(ctx, m)
		}
		// Otherwise: an answer to a call this incarnation did not make or cancelled,
		// or a duplicate.
		a.maybeDrained(ctx)
	case *deadlineTick:
		a.step(ctx, nil)
	}
	a.reportIdle(ctx)
	a.idle.handled() // nothing once stopped
}

// reportIdle tells a host that bounds its sessions when this session becomes idle,
// once per idle spell and host-forwarded message: no running task, no effect in
// flight.
func (a *SessionActor) reportIdle(ctx actor.Context) {
	if _, lifecycle := ctx.Message().(actor.AutoReceiveMessage); lifecycle || a.deps.MaxLiveSessions <= 0 || a.state == nil || a.drain.on {
		return
	}
	if a.state.Active() != "" || !a.modelKey.IsZero() || len(a.inflight) > 0 {
		a.idleAt = -1
		return
	}
	// The host forwards a new actor its first message as it spawns it: a report
	// before that one is handled would be stale.
	if a.idleAt != *a.handled && *a.handled > 0 {
		a.idleAt = *a.handled
		ctx.Send(ctx.Parent(), &becameIdle{session: a.id, pid: ctx.Self(), handled: a.idleAt})
	}
}

// ioCtx bounds an append or a read by IOTimeout (give or take a sixteenth of it).
func (a *SessionActor) ioCtx() context.Context {
	return a.deps.io.Context()
}

// recover folds the session's events and re-issues unanswered effects. A session
// started for a new task (unread) reads nothing yet: claim or load does.
func (a *SessionActor) recover(ctx actor.Context) {
	a.reset()
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.reply = func(rep messages.EffectReply) { root.Send(self, &rep) }
	a.idle = newIdleWakeup(ctx.ActorSystem().Root, ctx.Self(), a.deps.IdleTimeout, &idleTimeout{})
	if a.unread {
		return
	}
	_ = a.mustLoad(ctx) // an error stopped the actor
}

// reset makes the session's state that of a session with no events, and forgets
// the effects in flight.
func (a *SessionActor) reset() {
	a.state = a.newState()
	a.inflight = a.inflight[:0]
	a.queue = nil
	a.modelKey = messages.EffectKey{}
}

// newState returns the state of the session with no events.
func (a *SessionActor) newState() *SessionState {
	if as := a.deps.agents; as != nil {
		return NewSessionState(a.id).withSharedAgents(as)
	}
	return NewSessionState(a.id).WithAgents(a.agents())
}

// load folds the session's events, read from the log, into a state with none
// (reset), and goes on with unfinished work.
//
// A read that fails for a while (an outage) is retried in place (readDurably). It
// fails if the log holds what cannot be read or folded (a corrupt event, a closed
// log); the caller escalates (panics): the supervisor restarts the actor, which
// reads again. It stops the actor, and fails wrapping ErrNotOwner, when another
// node owns the session (eventlog.ErrFenced) or the actor was asked to stop while
// it retried a read (errStopped).
func (a *SessionActor) load(ctx actor.Context) error {
	a.unread = false
	a.undurable = true
	events, restored := a.restoreSnapshot()
	if restored {
		if err := a.fold(events); err != nil || a.state.Active() != "" {
			// A task runs: the session recovers from its whole history, as its
			// hooks (Recovered) read it. A fold that fails does so again below.
			a.state, a.snapSeq, restored = a.newState(), 0, false
		}
	}
	if !restored {
		err := a.readDurably("read its events", func(ctx context.Context) (err error) {
			events, err = a.deps.Store.Read(ctx, a.id, 1)
			return err
		})
		if err == nil {
			err = a.fold(events)
		}
		if errors.Is(err, errStopped) {
			a.fenced(ctx, err)
			return fmt.Errorf("%w: session %s: %w", ErrNotOwner, a.id, err)
		} else if err != nil {
			return fmt.Errorf("session %s: read events: %w", a.id, err)
		}
	}
	a.undurable = false
	if a.deps.StillOwned != nil {
		// After the read: a node that took the partition before the read recorded
		// its epoch before it wrote anything the read returned. A check that fails
		// otherwise (the log unreachable) is retried in place until it answers:
		// the session neither starts unchecked nor fails.
		err := a.readDurably("check its partition's owner", func(ctx context.Context) error {
			return a.deps.StillOwned(ctx, a.id)
		})
		if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errStopped) {
			a.fenced(ctx, err)
			return fmt.Errorf("%w: session %s: %w", ErrNotOwner, a.id, err)
		} else if err != nil {
			return fmt.Errorf("session %s: check its partition's owner: %w", a.id, err)
		}
	}
	var latest int64 // the session's latest TS (eventlog.SessionInfo.UpdatedUS)
	for _, e := range events {
		latest = max(latest, e.TS)
	}
	if a.republish && len(events) > 0 && !a.onBus(events[len(events)-1]) && latest >= a.publishedBefore {
		// Before anything of this incarnation's, so that the bus keeps the session's
		// order: its latest task's events, which the previous owner may have
		// appended and not published (with the task's result).
		a.publish(events[latestTaskStart(events):])
	}
	if a.deps.Recovered != nil && len(events) > 0 && a.state.Active() != "" {
		a.deps.Recovered(a.id, events)
	}
	if a.deps.LateCalls != nil {
		if keys := a.state.LateCalls(); len(keys) > 0 {
			a.deps.LateCalls(a.id, keys)
		}
	}
	if len(events) > 0 && a.state.Active() != "" {
		a.deps.Logger.Info("session recovered", "session", a.id, "events", len(events), "seq", a.state.LastSeq)
	}
	if a.end != nil && !a.end.done.Load() {
		a.endGivenUp(ctx)
		return nil
	}
	a.step(ctx, nil)
	return nil
}

// endGivenUp ends the task the session's previous actor failed on, before
// anything else: that actor's supervisor gave up on it after repeated failures
// (SessionHost.endGivenUp), and re-issuing the task's effects, or deciding its
// next step, would most likely fail the same way. The task fails with
// messages.ReasonSessionFailed and the last failure (redacted, as every event
// is), recorded as a cancellation is: an input of the session, at the time of the
// session's clock, with an ID of the session's sequence, so that a replay folds
// it and verification takes it as recorded. Its effects in flight are cancelled
// once the failure is durable, and none of them is issued again. The tasks queued
// behind it then run, as after any task's end.
//
// The task is the running one, unless the failure was on a new task (a SubmitTask)
// that is not it: that task was not recorded (its submitter was answered
// ErrSessionFailed), or waits its turn, and the running task, which did not fail,
// goes on. So it does when the failure was on the late answer of a task that had
// ended (LateAnswer), and so does a session with no task running.
func (a *SessionActor) endGivenUp(ctx actor.Context) {
	g := a.end
	task := a.state.Active()
	if g.tried && task != g.task {
		// An incarnation before this one recorded the end, and failed after it:
		// what is left of its work is to cancel the task's effects.
		g.done.Store(true)
		g.ended.Store(true)
		a.cancelGivenUp(g.keys)
		a.step(ctx, nil)
		return
	}
	if task == "" || g.noTask || (g.task != "" && g.task != task) {
		g.done.Store(true)
		a.step(ctx, nil)
		return
	}
	// An incarnation restarted after this one failed to record the end finds the
	// task ended, if the end was written after all, rather than blame the next.
	g.task = task
	var keys []messages.EffectKey
	if key, _, ok := a.state.PendingModel(); ok {
		keys = append(keys, key)
	}
	for _, pc := range a.state.appendPendingCalls(nil) {
		keys = append(keys, pc.Key)
	}
	g.tried, g.keys = true, keys
	steps, usage := a.state.Progress()
	e, err := a.event(&messages.TaskFailed{Reason: messages.ReasonSessionFailed, Error: a.givenUpError(g.failure), Steps: steps, Usage: usage,
		SubAgentsUsage: a.state.SubAgentsUsage()}, task, task, a.state.LastSeq+1)
	if err == nil {
		err = a.step(ctx, []messages.Envelope{e})
	}
	if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errStopped) {
		return // stopping: the session's next owner, or its next actor, ends it
	} else if err != nil {
		panic(fmt.Errorf("session %s: record the end of task %s, given up on: %w", a.id, task, err))
	}
	g.done.Store(true)
	g.ended.Store(true)
	a.cancelGivenUp(keys)
	a.deps.Logger.Warn("a session's task failed: its actor failed repeatedly on it, and its supervisor gave up on it",
		"session", a.id, "task", task, "last_failure", failureText(a.deps.Redactor, g.failure, 300))
}

// cancelGivenUp cancels the effects in flight of a task given up on, once its
// end is durable.
func (a *SessionActor) cancelGivenUp(keys []messages.EffectKey) {
	for _, k := range keys {
		a.deps.Effects.Cancel(k)
	}
}

// givenUpError is the error of a task failed with messages.ReasonSessionFailed:
// what its session's actor failed with last, redacted, at most maxGivenUpError
// bytes of it.
func (a *SessionActor) givenUpError(failure any) string {
	what := "the session's actor failed repeatedly on the task, and its supervisor stopped it"
	if err, ok := failure.(error); ok && (errors.Is(err, eventlog.ErrInvalidEvent) || errors.Is(err, eventlog.ErrSeqConflict)) {
		what = "the event log refused the session's writes repeatedly, and the session's supervisor stopped its actor"
	}
	return what + "; last failure: " + failureText(a.deps.Redactor, failure, maxGivenUpError)
}

// maxGivenUpError bounds the failure givenUpError quotes (a panic's value may be
// megabytes).
const maxGivenUpError = 1000

// fold folds events, read from the log, into the state, with the recorded
// configurations their tasks name (loadConfigs).
func (a *SessionActor) fold(events []messages.Envelope) error {
	if err := a.loadConfigs(events); err != nil {
		return fmt.Errorf("session %s: %w", a.id, err)
	}
	for _, e := range events {
		if err := a.state.Apply(e); err != nil {
			return fmt.Errorf("session %s: fold: %w", a.id, err)
		}
	}
	return nil
}

// restoreSnapshot makes the state the one of the session's fold snapshot, and
// returns the events after it, when the log keeps snapshots and the session's
// holds: its key is the sessions' (the rules, the codec, the agents), its
// checksum holds, it decodes, and the log's event at its seq is the one it was
// folded from. Otherwise it returns false and leaves the state as it was: the
// session folds its whole history. A session republishing its latest task
// (SetOwnership.Republish) reads it whole.
func (a *SessionActor) restoreSnapshot() ([]messages.Envelope, bool) {
	if a.deps.snapshotKey == nil || a.republish {
		return nil, false
	}
	snap, ok, err := a.deps.Snapshots.LoadSnapshot(a.ioCtx(), a.id)
	if err != nil {
		a.deps.Logger.Warn("session fold snapshot not read: folding the whole history", "session", a.id, "error", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	why := ""
	key := a.deps.snapshotKey()
	switch {
	case key.Codec == "" || snap.Rules != key.Rules || snap.Codec != key.Codec:
		why = "of another build"
	case snap.Agents != key.Agents:
		why = "of other agents"
	case snap.Sum != stateSum(snap.State):
		why = "corrupt"
	}
	var events []messages.Envelope
	if why == "" {
		if events, err = a.deps.Store.Read(a.ioCtx(), a.id, snap.Seq); err != nil {
			return nil, false // the whole history's read says it
		}
		if len(events) == 0 || events[0].Seq != snap.Seq || events[0].ID != snap.EventID || eventSum(events[0]) != snap.EventSum {
			why = "of another history"
		}
	}
	var s *SessionState
	if why == "" {
		if s, err = decodeState(snap.State, a.id, a.state.agents); err != nil || s.LastSeq != snap.Seq || s.lastID != snap.EventID {
			why = "corrupt"
		}
	}
	if why != "" {
		a.deps.Logger.Debug("session fold snapshot ignored: folding the whole history", "session", a.id, "seq", snap.Seq, "snapshot", why)
		return nil, false
	}
	a.state, a.snapSeq = s, snap.Seq
	return events[1:], true
}

// saveSnapshot saves the state as the session's fold snapshot, when the log
// keeps them and the state is worth one: it reflects the log (undurable unset),
// no task runs and no effect is in flight, and it folded SnapshotAfter events
// beyond the session's snapshot. A state that has none (errNoSnapshot: a team's
// task) or a log that refuses it leaves the snapshot as it was.
func (a *SessionActor) saveSnapshot() {
	s := a.state
	if a.deps.snapshotKey == nil || s == nil || a.unread || a.undurable || s.LastSeq == 0 ||
		s.Active() != "" || !a.modelKey.IsZero() || len(a.inflight) > 0 || s.LastSeq < a.snapSeq+uint64(a.deps.SnapshotAfter) {
		return
	}
	key := a.deps.snapshotKey()
	if key.Codec == "" {
		return // the build cannot be told (snapshotBuild)
	}
	b, err := encodeState(s)
	if err != nil {
		a.deps.Logger.Debug("session fold snapshot not saved", "session", a.id, "error", err)
		return
	}
	// The log's event at the state's last seq, which the next load checks: also
	// proof that the state's events are the log's.
	var last []messages.Envelope
	if pr, ok := a.deps.Store.(eventlog.PageReader); ok {
		last, err = pr.ReadN(a.ioCtx(), a.id, s.LastSeq, 1, 0)
	} else {
		last, err = a.deps.Store.Read(a.ioCtx(), a.id, s.LastSeq)
	}
	if err != nil || len(last) == 0 || last[0].Seq != s.LastSeq || last[0].ID != s.lastID {
		a.deps.Logger.Debug("session fold snapshot not saved: the log's last event is not the state's", "session", a.id, "seq", s.LastSeq, "error", err)
		return
	}
	snap := eventlog.FoldSnapshot{SessionID: a.id, Seq: s.LastSeq, EventID: s.lastID, EventSum: eventSum(last[0]),
		Rules: key.Rules, Codec: key.Codec, Agents: key.Agents, State: b, Sum: stateSum(b)}
	if err := a.deps.Snapshots.SaveSnapshot(a.ioCtx(), snap); err != nil {
		level := slog.LevelWarn
		if errors.Is(err, eventlog.ErrClosed) {
			level = slog.LevelDebug // the node closed its log before its sessions stopped
		}
		a.deps.Logger.Log(context.Background(), level, "session fold snapshot not saved", "session", a.id, "error", err)
		return
	}
	a.snapSeq = s.LastSeq
}

// loadConfigs hands the state the recorded configurations that the tasks among
// events name and that are none of the node's agents' now (those the tasks run
// under as they are), read from their streams (LoadConfigs).
func (a *SessionActor) loadConfigs(events []messages.Envelope) error {
	var digests []string
	for _, d := range NamedConfigs(events) {
		if !a.deps.live[d] {
			digests = append(digests, d)
		}
	}
	if len(digests) == 0 {
		return nil
	}
	var configs map[string]*messages.AgentConfig
	err := a.readDurably("read the configurations its tasks name", func(ctx context.Context) (err error) {
		configs, err = LoadConfigs(ctx, a.deps.Configs, digests)
		return err
	})
	if err != nil {
		return err
	}
	a.state.WithConfigs(configs)
	return nil
}

// storeConfig stores the configuration that task, new and folded, names
// (ConfigDigest) in its stream, just before the batch that records the task
// (step, unstored), so that a node configured otherwise that folds the task finds
// it, and a task the fold refuses stores nothing: once per node
// (SessionDeps.stored), the log keeping the first when several nodes store it (the
// same event at the same position). Its secrets are redacted as the session's
// events' are. An error is the batch's: the task is not recorded.
func (a *SessionActor) storeConfig(task messages.Payload) error {
	p, ok := task.(*messages.TaskSubmitted)
	if !ok || p.ConfigDigest == "" || a.deps.stored.has(p.ConfigDigest) {
		return nil
	}
	ag, ok := a.agents().For(p.Agent)
	if !ok {
		return nil
	}
	c := ag.configOf(rulesOf(p))
	if ConfigDigest(&c) != p.ConfigDigest {
		return nil // not this node's configuration: stampConfig set none such
	}
	e, err := messages.ConfigRecordedEvent(p.ConfigDigest, c, a.deps.Clock.Now().UnixMicro())
	if err != nil {
		return err
	}
	e.Payload = a.deps.Redactor.Bytes(e.Payload)
	a.storingConfig = true
	err = a.appendDurably([]messages.Envelope{e})
	a.storingConfig = false
	if err != nil {
		return fmt.Errorf("store the configuration of its task: %w", err)
	}
	a.deps.stored.add(p.ConfigDigest)
	return nil
}

// onBus reports whether the session's events up to last, its last event, and its
// result if it ends a task, are on the bus already (SessionDeps.Published and OnBus).
func (a *SessionActor) onBus(last messages.Envelope) bool {
	if a.deps.Published != nil && a.deps.Published(a.id, last.Seq) {
		return true
	}
	return a.deps.OnBus != nil && a.state.ReplyTopic(last.CorrelationID) == "" && a.deps.OnBus(a.id, last.Seq)
}

// mustLoad loads the events of a session that has not read them (unread), before
// it handles a message other than its new task. It returns the error of a load
// that stopped the actor (ErrNotOwner: fenced, or asked to stop while it retried
// a read of the log), and panics when the load failed otherwise.
func (a *SessionActor) mustLoad(ctx actor.Context) error {
	if err := a.load(ctx); stoppedLoad(err) {
		return err
	} else if err != nil {
		panic(err)
	}
	return nil
}

// stoppedLoad reports whether err is that of a load that stopped the actor: the
// log fenced the session, or the actor was asked to stop while a read was retried.
func stoppedLoad(err error) bool {
	return errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errStopped)
}

// claim submits the task of a session that has not read its log (unread) as the
// first event of a session with no events: the task at seq 1 and what the agent
// decides after it, in one batch. A ClaimingStore writes the batch only if the
// session has no event at all, so that an append that succeeds proves the session
// had none, and the state folded from the batch alone is the session's: whatever
// the task's ID, also a task delivered again whose first run wrote the very same
// batch, and on a sharded node, where a previous owner's events of a lower epoch
// would not conflict with an append at their seqs. With a store that cannot
// claim, the batch is appended, and the log refuses it with ErrSeqConflict if the
// session has an event at seq 1 (a session's events are numbered from 1 without
// gaps); that is a claim only for a task whose ID is new (SubmitTask.New), which
// cannot be stored already: the batch cannot be taken for a redelivery of events
// stored before. claim reports false when the task cannot be claimed that way or
// the log refused the batch: nothing was written, nor issued, and the caller
// reads the log (load) and submits the task as any session does.
func (a *SessionActor) claim(ctx actor.Context, m *SubmitTask) bool {
	a.unread = false
	e := m.Envelope
	if e.Type != messages.TypeTaskSubmitted {
		return false // refused by submit, once the session read its events
	}
	if a.deps.claims == nil && !m.New {
		return false
	}
	e.Seq = 1
	e.CorrelationID = e.ID
	if e.TS == 0 {
		e.TS = a.deps.Clock.Now().UnixMicro()
	}
	e.Actor = "session"
	e, p := stampRules(e, m.Task, a.state) // a new task runs under this build's rules and the node's configuration
	a.claiming, a.claimRetried, a.newTask, a.unstored = true, false, true, p
	err := a.step(ctx, oneEvent(e), p)
	a.claiming, a.newTask, a.unstored = false, false, nil
	switch {
	case errors.Is(err, eventlog.ErrSeqConflict):
		a.deps.Logger.Debug("session has events: reading them before its new task", "session", a.id)
		a.reset()
		if a.claimRetried {
			// An earlier attempt may have written the batch and been answered too
			// late: the session's latest task's events may then be its, which
			// nobody published. load publishes them again (duplicates at worst).
			a.republish = true
		}
		return false
	case err != nil:
		// Refused before anything was written (a payload the fold cannot decode):
		// the session has still read nothing.
		m.answer(ctx, err)
		a.reset()
		a.unread = true
	default:
		m.answer(ctx, &TaskAccepted{SessionID: a.id, Seq: e.Seq})
	}
	return true
}

// maxRepublishedTail bounds the events recover publishes again: a previous owner's
// unpublished events are its last few batches.
const maxRepublishedTail = 256

// latestTaskStart returns the index of the latest task.submitted of events, within
// the last maxRepublishedTail events (that bound when there is none).
func latestTaskStart(events []messages.Envelope) int {
	from := max(0, len(events)-maxRepublishedTail)
	for i := len(events) - 1; i > from; i-- {
		if events[i].Type == messages.TypeTaskSubmitted {
			return i
		}
	}
	return from
}

func (a *SessionActor) submit(ctx actor.Context, m *SubmitTask) {
	if a.unread {
		if a.claim(ctx, m) {
			return
		}
		if err := a.load(ctx); stoppedLoad(err) {
			// ErrNotOwner: the task is the partition's new owner's, or is retried
			// where the session runs next.
			m.answer(ctx, err)
			return
		} else if err != nil {
			panic(err) // the task is answered ErrSessionFailed (sessionMailbox)
		}
	}
	e := m.Envelope
	if a.state.Seen(e.ID) {
		m.answer(ctx, &TaskAccepted{SessionID: a.id, Duplicate: true})
		return
	}
	// The payload is decoded once, by the fold (step): a task it cannot decode is
	// refused there, before anything is written.
	if e.Type != messages.TypeTaskSubmitted {
		m.answer(ctx, fmt.Errorf("actors: session %s: expected %s, got %s", a.id, messages.TypeTaskSubmitted, e.Type))
		return
	}
	if limit := a.deps.MaxQueuedTasks; limit > 0 && a.state.Active() != "" && a.state.QueuedTasks() >= limit {
		m.answer(ctx, fmt.Errorf("%w: session %s has %d tasks waiting behind the running one, at most %d: send task %s again once some have run", ErrQueueFull, a.id, a.state.QueuedTasks(), limit, e.ID))
		return
	}
	e.Seq = a.state.LastSeq + 1
	e.CorrelationID = e.ID
	if e.TS == 0 {
		e.TS = a.deps.Clock.Now().UnixMicro()
	}
	e.Actor = "session"
	e, p := stampRules(e, m.Task, a.state) // a new task runs under this build's rules and the node's configuration
	a.newTask = a.state.Active() == "" && len(a.inflight) == 0 && a.modelKey.IsZero()
	a.unstored = p
	err := a.step(ctx, oneEvent(e), p)
	a.newTask, a.unstored = false, nil
	if err != nil {
		m.answer(ctx, err)
		if errors.Is(err, errNotRecorded) {
			// The state holds the task the log refused: the session reads its log
			// again before its next message.
			a.reset()
			a.unread = true
		}
		return
	}
	m.answer(ctx, &TaskAccepted{SessionID: a.id, Seq: e.Seq})
}

func (a *SessionActor) cancel(ctx actor.Context, m *CancelTask) {
	task := a.cancelled(m)
	if task == "" {
		ctx.Respond(a.notCancelled(m))
		return
	}
	// A task whose deadline passed before its wake-up came fails at it first, as
	// an approval past its expiry is rejected before an answer (resolveApproval):
	// the cancellation then finds it ended.
	now, err := a.dueFirst(ctx, a.state.NextDeadline())
	if err != nil {
		ctx.Respond(err)
		return
	}
	if a.cancelled(m) != task {
		ctx.Respond(a.notCancelled(m))
		return
	}
	reason := m.Reason
	if reason == "" {
		reason = "cancelled by request"
	}
	p := &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: reason}
	if task == a.state.Active() {
		p.Steps, p.Usage = a.state.Progress()
		p.SubAgentsUsage = a.state.SubAgentsUsage()
	}
	e, err := a.eventAt(p, task, task, a.state.LastSeq+1, now)
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

// notCancelled is the answer to m when it cancels nothing: ErrTaskCancelled
// when m names a task that ended cancelled, else ErrNoRunningTask.
func (a *SessionActor) notCancelled(m *CancelTask) error {
	if m.TaskID == "" {
		return ErrNoRunningTask
	}
	return a.state.CancelledTask(m.TaskID)
}

// cancelled returns the ID of the task m cancels: the running one when m names
// none or names it, else the task m names while it waits its turn behind the
// running one (it then never starts: a caller that gave up on a task queued in
// a busy session); "" when there is none.
func (a *SessionActor) cancelled(m *CancelTask) string {
	task := a.state.Active()
	if task != "" && (m.TaskID == "" || m.TaskID == task || m.TaskID == a.state.TaskName(task)) {
		return task
	}
	if m.TaskID == "" {
		return ""
	}
	return a.state.QueuedTask(m.TaskID)
}

// dueFirst records first what a timer due at due (a task's deadline, an
// approval's expiry; 0: none) decides when it passed before its wake-up came, and
// returns the instant a request is judged and recorded at: now, or just after
// what that step recorded. A request judged in time is so recorded before the
// timer, however long its handling takes.
func (a *SessionActor) dueFirst(ctx actor.Context, due int64) (int64, error) {
	now := a.deps.Clock.Now().UnixMicro()
	if due > 0 && now >= due && !a.drain.on {
		if err := a.step(ctx, nil); err != nil {
			return 0, err
		}
		now = max(now, a.state.LastTS)
	}
	return now, nil
}

// resolveApproval records a human's answer to a pending approval.
func (a *SessionActor) resolveApproval(ctx actor.Context, m *ResolveApproval) {
	// An approval that expired before its wake-up came is rejected first: an answer
	// after the expiry is too late, whenever the timer fires.
	now, err := a.dueFirst(ctx, a.state.NextApprovalExpiry())
	if err != nil {
		ctx.Respond(err)
		return
	}
	pending, duplicate, err := a.state.CheckAnswer(m.Call, m.Approve)
	switch {
	case err != nil:
		ctx.Respond(err)
		return
	case duplicate:
		ctx.Respond(&TaskAccepted{SessionID: a.id, Duplicate: true})
		return
	}
	task := a.state.Active()
	e, err := a.eventAt(&messages.ApprovalResolved{Key: pending.Key, Approve: m.Approve, Reason: m.Reason, By: m.By},
		a.approvalCause(pending.Key), task, a.state.LastSeq+1, now)
	if err != nil {
		ctx.Respond(err)
		return
	}
	e.Actor = "approval/" + m.By
	if err := a.step(ctx, []messages.Envelope{e}); err != nil {
		ctx.Respond(err)
		return
	}
	ctx.Respond(&TaskAccepted{SessionID: a.id, Seq: e.Seq})
}

// approvalCause is the ID of the ApprovalRequested event of the call keyed key.
func (a *SessionActor) approvalCause(key string) string {
	if ap := a.state.approvals[key]; ap != nil {
		return ap.requestID
	}
	return ""
}

func (a *SessionActor) onModel(ctx actor.Context, m *messages.EffectReply) {
	key, reqID, ok := a.state.PendingModel()
	if !ok || key != m.Key {
		return
	}
	a.modelKey = messages.EffectKey{}
	p := &messages.ModelResponded{Key: a.state.pendingModelText(), Model: m.Model, Usage: m.Usage, LatencyUS: m.LatencyUS, Cached: m.Cached, Error: m.Error, FinishReason: m.FinishReason}
	if m.Message != nil {
		p.Message = *m.Message
	}
	e, err := a.event(p, reqID, a.state.Active(), a.state.LastSeq+1)
	if err != nil {
		panic(err)
	}
	e.Actor = a.deps.actors.model(m.Model)
	a.mustStep(ctx, e, p)
}

func (a *SessionActor) onTool(ctx actor.Context, m *messages.EffectReply) {
	a.inflight.remove(m.Key)
	var buf [pendingOnStack]PendingCall
	for _, pc := range a.state.appendPendingCalls(buf[:0]) {
		if pc.Key != m.Key {
			continue
		}
		p := &messages.ToolCallCompleted{Key: pc.Request.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool, Result: m.Output, Error: m.Error, LatencyUS: m.LatencyUS, Usage: m.Usage}
		e, err := a.event(p, pc.EventID, a.state.Active(), a.state.LastSeq+1)
		if err != nil {
			panic(err)
		}
		e.Actor = a.deps.actors.tool(pc.Request.Tool)
		a.mustStep(ctx, e, p)
		return
	}
	a.dispatchTools(ctx)
}

// oneEvent returns a batch of e, with room for the events the agent decides after
// it (a step nearly always decides one).
func oneEvent(e messages.Envelope) []messages.Envelope {
	b := make([]messages.Envelope, 1, 2)
	b[0] = e
	return b
}

// mustStep steps with e, the event of an effect's answer, whose payload is p.
func (a *SessionActor) mustStep(ctx actor.Context, e messages.Envelope, p messages.Payload) {
	if err := a.step(ctx, oneEvent(e), p); errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errStopped) {
		return // stopping
	} else if err != nil {
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
	e.ID = a.state.keyAt(seq)
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
// payloads, when given, are the payloads batch's events were encoded from, to fold
// without decoding them again (SessionState.applyEncoded) unless redaction changed them.
func (a *SessionActor) step(ctx actor.Context, batch []messages.Envelope, payloads ...messages.Payload) error {
	a.undurable = true // until the batch is appended
	// The state is updated before the batch is durable. That is safe: a write that
	// fails for good restarts the actor, which refolds from the log, so in-memory
	// state never outlives a write it does not reflect.
	for i := range batch {
		// Inputs and effect results may carry secrets; decisions are built from them.
		encoded := batch[i].Payload
		batch[i].Payload = a.deps.Redactor.Bytes(encoded)
		var err error
		if i < len(payloads) && payloads[i] != nil && sameBytes(batch[i].Payload, encoded) {
			err = a.state.applyEncoded(batch[i], payloads[i])
		} else {
			err = a.state.Apply(batch[i])
		}
		if err != nil {
			return err
		}
	}
	if a.deps.Stamping != nil {
		earliest := int64(math.MaxInt64)
		for i := range batch {
			earliest = min(earliest, batch[i].TS)
		}
		a.deps.Stamping(a.id, earliest)
	}
	now := a.deps.Clock.Now().UnixMicro()
	for {
		d := a.state.DecideAmong(a.agents(), a.state.LastSeq+1, now)
		if d == nil {
			break
		}
		e, err := a.eventAt(d.Payload, d.CausationID, d.TaskID, a.state.LastSeq+1, now)
		if err != nil {
			return err
		}
		if err := a.state.applyEncoded(e, d.Payload); err != nil {
			return err
		}
		batch = append(batch, e)
	}
	if len(batch) > 0 {
		err := a.storeConfig(a.unstored) // the task was folded: it is recorded next
		a.unstored = nil
		if err == nil {
			err = a.appendDurably(batch)
		}
		if err != nil {
			if a.claiming && errors.Is(err, eventlog.ErrSeqConflict) {
				return err
			}
			if errors.Is(err, errNotRecorded) {
				if a.deps.Handed != nil {
					a.deps.Handed(a.id) // the step appended nothing
				}
				return fmt.Errorf("session %s: %w", a.id, err)
			}
			if a.deps.Handed != nil && errors.Is(err, eventlog.ErrFenced) {
				// Another node owns the session's partition now: what the batch holds
				// is its to publish (it folds the session when it takes it), and this
				// actor stops, so it has no next step to end the bracket.
				a.deps.Handed(a.id)
			}
			a.fenced(ctx, err) // or stopped
			return fmt.Errorf("%w: session %s: %w", ErrNotOwner, a.id, err)
		}
		if a.deps.Live != nil {
			a.deps.Live(a.id, batch)
		}
		a.publish(batch)
	}
	a.undurable = false
	if a.deps.Handed != nil {
		a.deps.Handed(a.id)
	}
	a.issueEffects(ctx)
	return nil
}

// sameBytes reports whether a and b are the same slice (redaction returns its input
// when it finds nothing to redact).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// fenced stops a session whose append the log refused with eventlog.ErrFenced:
// another node owns its partition now (this node hung past the group's session
// timeout, and Kafka moved the partition). Retrying cannot succeed, and a restart
// would refold a history the new owner is writing: the actor stops, issuing
// nothing more, and the task waits on the bus for the new owner.
//
// It also stops a session asked to stop while it retried a write or a read
// (errStopped); it was stopping anyway.
func (a *SessionActor) fenced(ctx actor.Context, err error) {
	if errors.Is(err, errStopped) {
		a.deps.Logger.Warn("session stopped while it retried the event log; its requests are retried where the session runs next", "session", a.id, "err", err)
	} else {
		a.deps.Logger.Warn("session fenced: another node owns its partition now; stopping", "session", a.id, "err", err)
	}
	a.stopTimer()
	if a.drain.drainer != nil {
		ctx.Send(a.drain.drainer, &Drained{})
		a.drain.drainer = nil
	}
	a.drain.on = true // issue no more effects
	ctx.Stop(ctx.Self())
}

// appendDurably writes a batch to the log. A log that is down (an outage, a full
// disk) is retried in place with backoff, for as long as it takes: nothing can go on
// before the batch is durable, and appends are idempotent on event ID, so a retry
// of a write whose outcome was unknown is safe. But the batch of a new task of an
// idle session (newTask) that a full log refused at the first attempt, which wrote
// nothing, is returned (errNotRecorded): nothing is in hand that would be lost,
// and its submitter is told now, rather than waiting out its timeout to be told
// that the task was not recorded while it is, later. A batch the log refuses for its
// content, or a node that is stopping, panics instead: the supervisor restarts the
// actor, which refolds from what is durable. A batch refused with
// eventlog.ErrFenced is returned: the session must stop (fenced).
//
// An actor asked to stop (its partitions revoked, the node closing) stops retrying:
// the retries' attempts run under its stop context, and it returns errStopped
// instead of waiting for the next one, so that the Stop and the requests queued
// behind are handled now, not once the log recovered. The batch may be written or
// not (an attempt's outcome may be unknown): the request it was for is answered
// ErrNotOwner, and its retry, where the session runs next, finds it by ID. A first
// attempt in flight is waited for (IOTimeout bounds it).
func (a *SessionActor) appendDurably(batch []messages.Envelope) error {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := a.ioCtx(), context.CancelFunc(nil)
		if attempt > 1 {
			ctx, cancel = context.WithTimeout(a.stop.context(), a.deps.IOTimeout)
		}
		var err error
		if a.storingConfig {
			err = a.deps.Configs.Append(ctx, batch)
		} else if a.claiming && a.deps.claims != nil {
			err = a.deps.claims.Claim(ctx, batch)
		} else {
			err = a.deps.Store.Append(ctx, batch)
		}
		if cancel != nil {
			cancel()
		}
		if err == nil {
			if a.deps.LogWrites != nil {
				a.deps.LogWrites(attempt, nil, false)
				if attempt > 1 {
					a.deps.Logger.Debug("event log write succeeded after retries", "session", a.id, "attempts", attempt)
				}
			} else if attempt > 1 {
				a.deps.Logger.Info("event log write succeeded after retries", "session", a.id, "attempts", attempt)
			}
			return nil
		}
		if errors.Is(err, eventlog.ErrFenced) {
			return err
		}
		if a.storingConfig && errors.Is(err, eventlog.ErrSeqConflict) {
			// Another event holds the configuration's position (an import's): a
			// node folding the task reads it, and runs the task as recorded if it
			// is the configuration, as in a log that lost it if not.
			a.deps.Logger.Warn("a configuration's stream holds another event; left as it is", "session", a.id, "stream", batch[0].SessionID, "err", err)
			return nil
		}
		if a.claiming && errors.Is(err, eventlog.ErrSeqConflict) {
			a.claimRetried = attempt > 1
			return err // the session has events: claim reads them
		}
		if errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrInvalidEvent) {
			panic(fmt.Errorf("session %s: append %d events at seq %d: %w", a.id, len(batch), batch[0].Seq, err))
		}
		refuse := attempt == 1 && a.newTask && errors.Is(err, eventlog.ErrFull)
		if a.deps.LogWrites != nil && a.stop.context().Err() == nil { // not an attempt cut short by a stop
			a.deps.LogWrites(attempt, err, !refuse)
		}
		if refuse {
			return fmt.Errorf("%w: %w", errNotRecorded, err)
		}
		level := slog.LevelWarn
		if a.deps.LogWrites != nil {
			level = slog.LevelDebug // the node tells the outage once
		}
		a.deps.Logger.Log(context.Background(), level, "event log write failed; retrying", "session", a.id, "seq", batch[0].Seq, "attempt", attempt, "retry_in", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-a.deps.Stopping:
			panic(fmt.Errorf("session %s: node stopping with %d events at seq %d unwritten: %w", a.id, len(batch), batch[0].Seq, err))
		case <-a.stop.context().Done():
			return fmt.Errorf("%w: %d events at seq %d not written after %d attempts: %w", errStopped, len(batch), batch[0].Seq, attempt, err)
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// readDurably runs read, a read of the log as a session starts (its events, the
// configurations its tasks name, its partition's current epoch: StillOwned), and
// retries it in place with backoff while it fails in a way a retry may mend (an
// outage, a timeout: eventlog.ReadRetry), for as long as it takes: a session that
// cannot read its log can do nothing, and one that failed instead (a restart,
// then its supervisor giving up after 5 in 10 s) would drop the task in flight
// it was resuming, and answer the requests queued behind it ErrSessionFailed.
// Requests wait in its mailbox meanwhile. An actor asked to stop (its partitions
// revoked), or a node stopping, ends the retries: read returns errStopped, and the
// actor stops as when fenced (its requests are answered ErrNotOwner, retried where
// the session runs next). A permanent error (eventlog.ClassifyFailure: fenced,
// corrupt rows, a ClickHouse schema or auth error) is returned at once, as is an
// error of unknown kind once it has lasted eventlog.UnknownFailureBound: the
// session fails, and the requests queued behind it are answered ErrSessionFailed
// instead of waiting for a log that will not answer.
func (a *SessionActor) readDurably(what string, read func(context.Context) error) error {
	wait, cancel := context.WithCancel(a.stop.context()) // asked to stop, or the node stopping, ends the waits
	defer cancel()
	go func() {
		select {
		case <-a.deps.Stopping:
			cancel()
		case <-wait.Done():
		}
	}()
	attempts, err := eventlog.RetryRead(wait, 50*time.Millisecond, nil, func(attempt int) error {
		if attempt == 1 {
			return read(a.ioCtx())
		}
		ctx, cancel := context.WithTimeout(a.stop.context(), a.deps.IOTimeout)
		defer cancel()
		return read(ctx)
	}, func(attempt int, wait time.Duration, err error) {
		level := slog.LevelDebug
		if attempt == 1 || attempt%20 == 0 {
			level = slog.LevelWarn // once at first, then now and then: every session waiting says it
		}
		a.deps.Logger.Log(context.Background(), level, "event log read failed as the session starts; it waits and retries", "session", a.id, "read", what, "attempt", attempt, "retry_in", wait, "err", err)
	})
	switch {
	case err == nil:
		if attempts > 1 {
			a.deps.Logger.Info("event log read succeeded after retries", "session", a.id, "read", what, "attempts", attempts)
		}
		return nil
	case eventlog.ClassifyFailure(err) == eventlog.FailurePermanent:
		return err // whether or not the actor was asked to stop meanwhile
	case a.stop.context().Err() != nil:
		return fmt.Errorf("%w: could not %s after %d attempts: %w", errStopped, what, attempts, err)
	case wait.Err() != nil:
		return fmt.Errorf("%w: node stopping: could not %s after %d attempts: %w", errStopped, what, attempts, err)
	}
	return err
}

// errNotRecorded is returned by appendDurably for a new task's batch that a full log
// refused (SessionActor.newTask).
var errNotRecorded = errors.New("the task was not recorded, the event log has no room: send it again once space is freed")

// errStopped is returned by appendDurably and readDurably when the actor was asked
// to stop (or its node stopped, for a read) while it retried a write or a read.
var errStopped = errors.New("the session was asked to stop while it retried the event log")

// maybeDrained answers Drain once nothing is in flight, or nothing in flight matters:
// the answers to a finished (or cancelled) task are not recorded.
func (a *SessionActor) maybeDrained(ctx actor.Context) {
	idle := a.modelKey.IsZero() && len(a.inflight) == 0
	if a.drain.on && a.drain.drainer != nil && (idle || a.state.Active() == "") {
		ctx.Send(a.drain.drainer, &Drained{})
		a.drain.drainer = nil
	}
}

func (a *SessionActor) agents() Agents { return Agents{Default: a.deps.Agent, Named: a.deps.Named} }

// agent is the agent of the running task (the default one when there is none, or
// when the task names an unknown one: such a task fails before any effect).
func (a *SessionActor) agent() Agent {
	return a.state.activeTaskAgent(&a.deps.Agent, a.deps.Named)
}

// pendingOnStack is how many pending calls the session actor gathers without
// allocating (SessionState.appendPendingCalls).
const pendingOnStack = 4

func (a *SessionActor) issueEffects(ctx actor.Context) {
	var buf [pendingOnStack]PendingCall
	pending := a.state.appendPendingCalls(buf[:0])
	a.cancelAbandoned(pending)
	if a.drain.on {
		return // the session's next owner issues what is requested and unanswered
	}
	// The running task's agent, computed once and only when an effect needs it:
	// most calls issue no tool call, and the agent is costly to derive
	// (SessionState.ActiveTaskAgent). The state does not change in between.
	var agent Agent
	haveAgent := false
	if key, _, ok := a.state.PendingModel(); ok && a.modelKey != key {
		a.modelKey = key
		agent, haveAgent = a.agent(), true
		r := a.state.Request(agent)
		r.Scope = llm.Scope{Agent: agent.Name}
		if r.Models == nil {
			r.Models = agent.Models // a paradigm's call may name its own (a critic's)
			if agent.recordedModel && a.deps.Routable != nil && !a.deps.Routable(r.Models) {
				// The task's recorded model, which this node no longer has: its own
				// answers, and model.responded names it (config.go).
				r.Models = nil
			}
		}
		call := r.Call()
		a.deps.Effects.Perform(messages.EffectRequest{SessionID: a.id, Key: key, Model: &call,
			Outward: key.Outward(a.state.Active(), a.state.pendingModelTS())}, a.reply)
	}
	a.queue = a.queue[:0]
	for _, pc := range pending {
		if a.inflight.has(pc.Key) {
			continue
		}
		if !haveAgent {
			agent, haveAgent = a.agent(), true
		}
		// A chain's call is run by the session, step by step (chain.go).
		if agent.hasTool(pc.Request.Tool) && !agent.isChainCall(pc.Request) {
			a.queue = append(a.queue, pc)
		}
	}
	a.dispatchToolsAs(ctx, agent.Name, haveAgent)
	a.armDeadline(ctx)
}

func (a *SessionActor) dispatchTools(ctx actor.Context) { a.dispatchToolsAs(ctx, "", false) }

// dispatchToolsAs is dispatchTools, with the name of the running task's agent
// when the caller has it (named; else it is derived when a call is dispatched).
func (a *SessionActor) dispatchToolsAs(ctx actor.Context, agentName string, named bool) {
	if a.drain.on {
		return
	}
	for len(a.queue) > 0 && len(a.inflight) < a.deps.MaxParallelTools {
		pc := a.queue[0]
		a.queue = a.queue[1:]
		a.inflight = append(a.inflight, pc.Key)
		call := pc.Request
		if !named {
			agentName, named = a.agent().Name, true
		}
		a.deps.Effects.Perform(messages.EffectRequest{SessionID: a.id, Key: pc.Key, Tool: &call, Agent: agentName,
			Outward: pc.Key.Outward(a.state.Active(), pc.TS)}, a.reply)
	}
}

// cancelAbandoned cancels the effects in flight that no task waits for any more: the
// task they were for was cancelled or ran out of time. A model's request is closed, a
// tool sees its context end. It runs after the events that ended the task are durable.
// pending are the tool calls the session still waits on.
func (a *SessionActor) cancelAbandoned(pending []PendingCall) {
	if !a.modelKey.IsZero() {
		if key, _, ok := a.state.PendingModel(); !ok || key != a.modelKey {
			a.deps.Effects.Cancel(a.modelKey)
			a.modelKey = messages.EffectKey{}
		}
	}
	a.inflight = slices.DeleteFunc(a.inflight, func(key messages.EffectKey) bool {
		if slices.ContainsFunc(pending, func(pc PendingCall) bool { return pc.Key == key }) {
			return false
		}
		a.deps.Effects.Cancel(key)
		return true
	})
}

// keySet is a set of effect keys: a session's tool calls in flight, at most
// MaxParallelTools, are few enough to be found by a scan, and a slice spares each
// new session a map.
type keySet []messages.EffectKey

func (ks keySet) has(k messages.EffectKey) bool { return slices.Contains(ks, k) }

// remove removes k, if it is there.
func (ks *keySet) remove(k messages.EffectKey) {
	if i := slices.Index(*ks, k); i >= 0 {
		*ks = slices.Delete(*ks, i, i+1)
	}
}

// armDeadline arms a wake-up for the earliest deadline of the running task and
// the tasks waiting their turn (NextDeadline) or its earliest approval expiry,
// whichever comes first: the agent then decides with the time.
func (a *SessionActor) armDeadline(ctx actor.Context) {
	a.stopTimer()
	deadline := a.state.NextDeadline()
	if exp := a.state.NextApprovalExpiry(); exp > 0 && (deadline == 0 || exp < deadline) {
		deadline = exp
	}
	if deadline == 0 {
		return
	}
	wait := time.Duration(deadline-a.deps.Clock.Now().UnixMicro()) * time.Microsecond
	a.deadline = newWakeup(ctx.ActorSystem().Root, ctx.Self(), max(wait, 0), &deadlineTick{})
}

func (a *SessionActor) stopTimer() {
	a.deadline.stop()
	a.deadline = nil
}

func (a *SessionActor) publish(batch []messages.Envelope) {
	pub := a.deps.Publisher
	if pub == nil {
		return
	}
	var msgs []*message.Message
	if hasReaders(pub, messages.TopicEvents) {
		msgs = make([]*message.Message, 0, len(batch))
		// The batch's events are encoded once, into one buffer: each message's
		// payload is its own piece of it, capped so that nothing appends over the
		// next one. The buffer is never reused: the bus may keep the payloads.
		size := 0
		for i := range batch {
			size += batch[i].SizeHint()
		}
		buf := make([]byte, 0, size)
		for _, e := range batch {
			start := len(buf)
			b, err := messages.AppendEnvelope(buf, e)
			if err != nil {
				a.deps.Logger.Error("encode event for the bus", "session", a.id, "seq", e.Seq, "err", err)
				continue
			}
			buf = b
			m := busMessage(e.ID, e.SessionID, e.Type, buf[start:len(buf):len(buf)])
			if len(m.Payload) > messages.BusMessageMax {
				// Too large for the bus: a reference, and the readers take the event
				// from the log (messages.MetaStored).
				ref := e
				ref.Payload = json.RawMessage("{}")
				if m.Payload, err = messages.Marshal(ref); err != nil {
					continue
				}
				m.Metadata.Set(messages.MetaStored, e.SessionID)
			}
			msgs = append(msgs, m)
		}
	}
	// A task's result goes to troupe.results and to its reply topic, if any.
	type result struct {
		msg       *message.Message
		toResults bool
		reply     string
	}
	var results []result
	for _, e := range batch {
		if e.Type != messages.TypeTaskCompleted && e.Type != messages.TypeTaskFailed {
			continue
		}
		res := result{toResults: hasReaders(pub, messages.TopicResults), reply: a.state.ReplyTopic(e.CorrelationID)}
		if res.reply != "" && !hasReaders(pub, res.reply) {
			res.reply = ""
		}
		if !res.toResults && res.reply == "" {
			continue
		}
		tr, _ := a.state.TaskResult(e.CorrelationID)
		tr.SessionID = a.id
		r, err := EncodeResult(tr)
		if err != nil {
			continue
		}
		res.msg = busMessage(e.ID+"/result", a.id, "", r)
		results = append(results, res)
	}
	// The log is the source of truth and already has these events; the bus copy feeds
	// live subscribers, so a failed publish is logged, not retried here.
	if len(msgs) > 0 {
		if err := pub.Publish(messages.TopicEvents, msgs...); err != nil {
			a.deps.Logger.Warn("publish events", "session", a.id, "err", err)
		}
	}
	for _, r := range results {
		if r.toResults {
			if err := pub.Publish(messages.TopicResults, r.msg); err != nil {
				a.deps.Logger.Warn("publish result", "session", a.id, "err", err)
			}
		}
		if r.reply != "" {
			if err := pub.Publish(r.reply, r.msg.Copy()); err != nil {
				a.deps.Logger.Warn("publish result to reply topic", "session", a.id, "topic", r.reply, "err", err)
			}
		}
	}
}

// EncodeResult encodes a task's result for the bus: whole when it fits one bus
// message (messages.BusMessageMax), else with its output, error and note cut, each
// at a UTF-8 boundary and by the share the encoding is over, until it fits, and
// Truncated set.
func EncodeResult(r messages.TaskResult) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil || len(b) <= messages.BusMessageMax {
		return b, err
	}
	r.Truncated = true
	for {
		keep := float64(messages.BusMessageMax-512) / float64(len(b))
		for _, f := range []*string{&r.Output, &r.Error, &r.Note} {
			*f = cutUTF8(*f, int(float64(len(*f))*keep))
		}
		if b, err = json.Marshal(r); err != nil || len(b) <= messages.BusMessageMax {
			return b, err
		}
	}
}

// cutUTF8 returns s cut to at most n bytes, at a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
