package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Effects is the one port a session's effects go through: model calls, tool calls and
// every kind to come. A request (messages.EffectRequest) and its reply
// (messages.EffectReply) keep their shape from the session to whoever performs the
// effect and back, whether this node performs it (LocalEffects) or another node with
// the role does (BusEffects). A new kind of effect adds a performer to LocalEffects,
// not a path.
//
// Implementations are safe for concurrent use.
type Effects interface {
	// Perform starts the effect req asks for and returns at once (it takes no ctx: the
	// effect outlives the call, and Cancel ends it). Its reply comes through reply,
	// exactly once, on any goroutine, with req's SessionID and Key; an effect that
	// failed is a reply with Error set. The exceptions are an implementation closed
	// while the effect runs (the node stops), and an effect of a session its node no
	// longer owns as the effect is about to start (LocalEffects.Owned): then no reply
	// comes, as if the process had died, and the session's next incarnation issues
	// the effect again with the same key.
	Perform(req messages.EffectRequest, reply func(messages.EffectReply))
	// Cancel ends the effect with this key: the context it runs under is cancelled (a
	// model's HTTP request is closed, a tool sees ctx.Done()), one still queued never
	// starts, and its caller is answered at once with an Error wrapping
	// ErrEffectCancelled. Cancelling an effect that is not here does nothing.
	Cancel(key messages.EffectKey)
}

// Errors an effect's reply may carry (as text, in EffectReply.Error).
var (
	// ErrEffectCancelled answers an effect ended by Effects.Cancel.
	ErrEffectCancelled = errors.New("effect cancelled")
	// ErrToolPanicked answers a tool call whose tool panicked.
	ErrToolPanicked = errors.New("tool panicked")
	// ErrToolTimeout answers a tool call that ran past its timeout.
	ErrToolTimeout = tools.ErrTimeout
	// ErrModelTimeout answers a model call that ran past its timeout.
	ErrModelTimeout = errors.New("model call timed out")
	// ErrNoSuchTool answers a tool call for a tool the performing node does not have.
	ErrNoSuchTool = errors.New("actors: no such tool on this node")
	// ErrNoModel answers a model call on a node that has no model.
	ErrNoModel = errors.New("actors: this node has no model")
	// ErrEffectsClosed is the cause of the context of the effects still running when
	// their performer closes (the node stops).
	ErrEffectsClosed = errors.New("actors: the node's effects are closed")
)

// LocalEffectsConfig configures LocalEffects.
type LocalEffectsConfig struct {
	// Model performs model calls; nil: model calls are answered with ErrNoModel.
	// Retries, fallback, quotas, cost and caching belong to it: the node gives it a
	// gateway.Gateway.
	Model llm.Model
	// Tools performs tool calls, one performer per tool.
	Tools *tools.Registry
	// Catalog performs the calls of tools that Tools lacks, when set (ToolCatalog).
	Catalog ToolCatalog
	// ModelTimeout bounds one model call (default 2 minutes); ToolTimeout one tool
	// call (default 30 s) of a tool that sets no timeout of its own (tools.Limits).
	// They count from the call's start, not its time in the queue.
	ModelTimeout, ToolTimeout time.Duration
	// ModelConcurrency bounds the model calls running at once (default 64);
	// ToolConcurrency the calls of each tool that sets no bound of its own (default 16). Calls past the bound wait in
	// a queue, not in goroutines.
	ModelConcurrency, ToolConcurrency int
	// Remember is how long an answer (or a cancellation) is kept to answer its key
	// again (default 10 minutes). At most MaxRemembered answers and cancellations are
	// kept (default DefaultMaxRemembered), taking at most about MaxRememberedBytes of
	// memory (default DefaultMaxRememberedBytes: their outputs and messages plus a
	// fixed cost each); past either bound the oldest go first. A key being performed
	// or queued is not an answer yet, and is never dropped.
	Remember           time.Duration
	MaxRemembered      int
	MaxRememberedBytes int
	// OnRepeat is called for each request answered by an earlier or concurrent
	// performance of its key (nil: none).
	OnRepeat func()
	// ModelDeltas, when set, says where the increments of a model call go as it
	// streams (nil: nowhere). A call for which it returns a function streams
	// (llm.WithDeltas) and hands its increments to it numbered (modelDeltas), on the
	// call's goroutine: the function must not block. done, when not nil, is called
	// once the call returned, before its reply is handed over (to flush what is
	// held). Increments are live only; the reply carries the whole answer, as without
	// them.
	ModelDeltas func(req messages.EffectRequest) (to func(messages.ModelDelta), done func())
	// Trace, when set, is called as each call starts, with the call's context and
	// request: it returns the context the call runs under (one holding the call's
	// span, for the tool or model to propagate) and, when not nil, a function given
	// the call's reply once it is answered, however it ends (the node's traces).
	Trace  func(ctx context.Context, req messages.EffectRequest) (context.Context, func(messages.EffectReply))
	Logger *slog.Logger
}

// Defaults of LocalEffectsConfig's bounds on the answers kept.
const (
	DefaultMaxRemembered      = 100_000
	DefaultMaxRememberedBytes = 32 << 20
)

func (c *LocalEffectsConfig) setDefaults() {
	if c.ModelTimeout <= 0 {
		c.ModelTimeout = 2 * time.Minute
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = 30 * time.Second
	}
	if c.ModelConcurrency <= 0 {
		c.ModelConcurrency = 64
	}
	if c.ToolConcurrency <= 0 {
		c.ToolConcurrency = 16
	}
	if c.Remember <= 0 {
		c.Remember = 10 * time.Minute
	}
	if c.MaxRemembered <= 0 {
		c.MaxRemembered = DefaultMaxRemembered
	}
	if c.MaxRememberedBytes <= 0 {
		c.MaxRememberedBytes = DefaultMaxRememberedBytes
	}
	if c.OnRepeat == nil {
		c.OnRepeat = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// LocalEffects performs effects on this node: for the node's own sessions, and for
// the requests it serves for nodes without its roles (the node's bus handler calls
// Perform with the request it read).
//
// Each kind of effect has a performer (the model, each tool) with a concurrency bound
// and a timeout. A request takes a slot of its performer before a goroutine starts
// for it; past the bound it waits in the performer's queue. Each call runs under a
// context of its own, with its timeout, that Close cancels, registered by key:
// Cancel cancels it. User code runs on that goroutine with panic
// recovery; a call that ignores its context is abandoned when the context ends (its
// reply says why, and its slot is free again), so a hanging tool or model never
// holds a session.
//
// Each key is performed once: a request for a key being performed waits for that
// performance, and one for a key performed (or cancelled) within Remember gets its
// answer again, as long as the answer is among the MaxRemembered newest and within
// MaxRememberedBytes (the node calls Expire so that answers also go when no request
// comes). Calls are made again when a session restarts or moves while its effect
// is in flight; when this node serves the call again it answers without calling the
// tool or model a second time. The tool's own idempotency on the key remains the
// guarantee across nodes and restarts; this saves the repeated call.
type LocalEffects struct {
	cfg     LocalEffectsConfig
	workers *workers // run the calls

	mu      sync.Mutex
	closed  bool
	model   *performer
	tools   map[string]*performer
	catalog map[string]*performer // made on first use (catalogPerformer)
	flights map[messages.EffectKey]*flight
	// whiles are the calls of PerformWhile waiting in their performers' queues
	// (kept apart from their flights, which remembered answers keep).
	whiles map[*flight]*queuedWhile
	// checks are the ownership checks of the calls of Owned, from their request
	// until they let the call start or drop it (kept apart from their flights,
	// as whiles are).
	checks map[*flight]*ownedCheck
	// peak is the most flights held since the map was last rebuilt: a Go map keeps
	// the memory of its largest size, so one that shrank well below it is copied.
	peak int
	// oldest and newest end the list of the remembered flights (answered or
	// cancelled), in the order they were answered; kept counts them and bytes is
	// their approximate size.
	oldest, newest *flight
	kept, bytes    int
}

var _ Effects = (*LocalEffects)(nil)

// modelGrace is how long a model call cancelled at its timeout has to answer
// itself, with what it spent, before the timeout answers it (performer.grace): a
// model's client returns at once when its context ends.
const modelGrace = 250 * time.Millisecond

// performer performs one kind of effect: its calls, their bound and their queue.
type performer struct {
	e       *LocalEffects // whose performer it is
	timeout time.Duration
	limit   int
	running int
	queue   []*flight
	// perform runs one call under ctx; user code runs inside it.
	perform func(ctx context.Context, req messages.EffectRequest) messages.EffectReply
	// failed is the reply of a call that ended with err instead (its context ended, or
	// it panicked).
	failed func(err error) messages.EffectReply
	// panicked is the error of a call that panicked with r.
	panicked func(r any) error
	// timedOut is the error of a call that ran past the timeout; timeoutCause says
	// after how long (made once: every call of the performer has the same timeout).
	timedOut, timeoutCause error
	// grace, when set, is how long a call cancelled at its timeout has to answer
	// itself (its reply says what it spent: a model call that timed out after its
	// request went out was billed its prompt) before the timeout answers it
	// instead, as it answers at once a call of a performer without one. At most
	// the timeout, so that no later call's deadline waits for it.
	grace time.Duration
	// oldest and newest end the list of the running calls, in the order they
	// started; with one timeout for every call, that is the order of their
	// deadlines. timer, made by the first call, fires at the oldest one's deadline
	// (or earlier: expire arms it again); armed says it is set. One timer per
	// performer, not one per call: starting and ending a call touch no timer.
	oldest, newest *flight
	timer          *time.Timer
	armed          bool
}

// run adds f, started at f.began, to p's running calls, and arms p's timer unless
// it is armed already (for an earlier deadline); the timer calls e.expire. The
// caller holds e.mu.
func (p *performer) run(f *flight, e *LocalEffects) {
	f.running, f.prevRun = true, p.newest
	if p.newest == nil {
		p.oldest = f
	} else {
		p.newest.nextRun = f
	}
	p.newest = f
	switch {
	case p.timer == nil:
		p.timer, p.armed = time.AfterFunc(p.timeout, func() { e.expire(p) }), true
	case !p.armed:
		p.timer.Reset(time.Until(p.oldest.began.Add(p.timeout)))
		p.armed = true
	}
}

// ended removes f from p's running calls, if it is there. The caller holds the
// effects' mutex (LocalEffects.mu).
func (p *performer) ended(f *flight) {
	if !f.running {
		return
	}
	if f.prevRun == nil {
		p.oldest = f.nextRun
	} else {
		f.prevRun.nextRun = f.nextRun
	}
	if f.nextRun == nil {
		p.newest = f.prevRun
	} else {
		f.nextRun.prevRun = f.prevRun
	}
	f.running, f.prevRun, f.nextRun = false, nil, nil
}

// withTimeoutCause sets p.timeoutCause from p.timedOut and p.timeout.
func (p *performer) withTimeoutCause() *performer {
	p.timeoutCause = deadlineError{fmt.Errorf("%w after %s", p.timedOut, p.timeout)}
	return p
}

// deadlineError is the cause of a call's context that ended at its timeout: its
// error, which is also context.DeadlineExceeded, as the cause of a context that
// ended at its deadline would be, so that the code under the call (a model's
// client counting what a timed-out request spent) knows it for one.
type deadlineError struct{ err error }

func (d deadlineError) Error() string   { return d.err.Error() }
func (d deadlineError) Unwrap() []error { return []error{d.err, context.DeadlineExceeded} }

// flight is one key's performance: queued, running, or done (and remembered).
type flight struct {
	key     messages.EffectKey
	req     messages.EffectRequest
	p       *performer
	waiters waiters
	cancel  context.CancelCauseFunc // set when it starts
	// Set when it starts: the session it answers and when it started (its deadline
	// is began plus its performer's timeout); answered is set by the first answer
	// (the call's, or its context's end). Once done, began is when it was answered
	// (remember): nothing reads its start then (the first answer read it for the
	// reply's latency before it was done, and it has left its performer's list of
	// running calls), and a flight one field smaller fits a smaller size class.
	session  string
	began    time.Time
	answered atomic.Bool
	// running says it is in its performer's list of running calls, between prevRun
	// and nextRun (performer.run).
	running          bool
	done             bool
	overdue          bool // cancelled at its timeout, given its performer's grace to answer
	prevRun, nextRun *flight
	rep              messages.EffectReply
	size             int // approximate memory of the remembered answer
	// newer is the next remembered flight, answered after this one.
	newer *flight
	// traced, when set, is given the answer (LocalEffectsConfig.Trace).
	traced func(messages.EffectReply)
}

// ownedCheck is the ownership check of a call of Owned not started yet (queued, or
// being checked on its goroutine).
type ownedCheck struct {
	check func(context.Context) error
	// claims counts the checks that replaced the first (Owned): a request of the
	// call's key claimed later, under the node's latest lease.
	claims int
	// served are the requests asked of no check (Perform, PerformWhile: those a
	// node serves for another) that joined the call meanwhile: it is performed
	// for them whatever the check says, and only its owned requests are dropped
	// when the check fails. Before, they were dropped with them: a request served
	// for another node, whose PerformWhile context is not watched once it joined,
	// waited for an answer until its node gave the partition up.
	served waiters
}

// queuedWhile is a call of PerformWhile waiting in its performer's queue: ctx is
// its context, withdrawn tells its caller it was dropped unstarted, and unwatch
// stops the watch of ctx (withdraw).
type queuedWhile struct {
	ctx       context.Context
	withdrawn func()
	unwatch   func() bool
}

// waiters are the callers a flight answers: the one that asked first and those that
// asked again while it ran.
type waiters struct {
	first func(messages.EffectReply)
	more  []func(messages.EffectReply)
}

func (w waiters) answer(rep messages.EffectReply) {
	if w.first != nil {
		w.first(rep)
	}
	for _, f := range w.more {
		f(rep)
	}
}

// NewLocalEffects returns the effects of a node that performs them itself.
func NewLocalEffects(cfg LocalEffectsConfig) *LocalEffects {
	cfg.setDefaults()
	e := &LocalEffects{cfg: cfg, workers: newWorkers(effectWorkers, workerIdle),
		tools: map[string]*performer{}, flights: map[messages.EffectKey]*flight{}, whiles: map[*flight]*queuedWhile{},
		checks: map[*flight]*ownedCheck{}}
	if m := cfg.Model; m != nil {
		name := m.Name()
		e.model = &performer{
			e:       e,
			timeout: cfg.ModelTimeout, limit: cfg.ModelConcurrency, timedOut: ErrModelTimeout,
			perform: func(ctx context.Context, req messages.EffectRequest) messages.EffectReply {
				if cfg.ModelDeltas != nil {
					if to, done := cfg.ModelDeltas(req); to != nil {
						ctx = llm.WithDeltas(ctx, modelDeltas(ctx, req, to))
						if done != nil {
							defer done()
						}
					}
				}
				r := llm.RequestOf(req.Key.String(), req.Outward, *req.Model)
				resp, err := m.Generate(ctx, r)
				// A copy: a pointer into resp would keep all of it with the answer.
				msg := resp.Message
				rep := messages.EffectReply{Model: name, Message: &msg, Usage: resp.Usage, Cached: resp.Cached, FinishReason: resp.FinishReason}
				if len(req.Model.Models) > 0 {
					rep.Model = req.Model.Models[0] // an agent's own chain (llm.Request.Models)
				}
				if resp.Model != "" {
					rep.Model = resp.Model
				}
				if err != nil {
					rep.Error = modelError(err.Error())
				}
				return rep
			},
			failed: func(err error) messages.EffectReply {
				return messages.EffectReply{Model: name, Error: modelError(err.Error())}
			},
			panicked: func(r any) error { return fmt.Errorf("model %s panicked: %v", name, r) },
			grace:    min(cfg.ModelTimeout, modelGrace),
		}
		e.model.withTimeoutCause()
	}
	for _, name := range cfg.Tools.Names() {
		t, _ := cfg.Tools.Get(name)
		p := toolPerformer(name, t, cfg)
		p.e = e
		e.tools[name] = p
	}
	return e
}

// modelDeltas numbers the increments of the model call req (messages.ModelDelta:
// Seq across attempts, Reset on the first increment of a later attempt) and hands
// them to to, until the call's context ends: an increment that comes after the
// call was answered (its timeout, Cancel) is dropped.
func modelDeltas(ctx context.Context, req messages.EffectRequest, to func(messages.ModelDelta)) llm.DeltaFunc {
	var mu sync.Mutex
	var seq uint64
	var attempt int
	key, step := req.Key.String(), req.Model.Step
	return func(a int, d llm.Delta) {
		if ctx.Err() != nil {
			return
		}
		mu.Lock()
		seq++
		reset := attempt != 0 && a != attempt
		attempt = a
		md := messages.ModelDelta{Key: key, Step: step, Seq: seq, Attempt: a, Reset: reset, Content: d.Content,
			ToolCallIndex: d.ToolCallIndex, ToolCallID: d.ToolCallID, ToolName: d.ToolName, Arguments: d.ArgumentsDelta}
		mu.Unlock()
		to(md)
	}
}

// toolPerformer performs the calls of tool t under its own limits (tools.Limits),
// cfg's defaults where it sets none, as tools.CallLimited applies them: arguments
// past its size are refused unread, and an output or error past its size reaches
// the model as its head and a note (tools.Truncate).
func toolPerformer(name string, t tools.Tool, cfg LocalEffectsConfig) *performer {
	lim := tools.LimitsOf(t)
	spends := tools.SpendsModelTokens(t) // its calls' reports are read (a sub-agent's tokens)
	p := &performer{timeout: cfg.ToolTimeout, limit: cfg.ToolConcurrency, timedOut: ErrToolTimeout}
	if lim.Timeout > 0 {
		p.timeout = lim.Timeout
	}
	if lim.Concurrency > 0 {
		p.limit = lim.Concurrency
	}
	p.perform = func(ctx context.Context, req messages.EffectRequest) messages.EffectReply {
		var spent func() messages.Usage
		if spends {
			ctx, spent = tools.WithUsageReport(ctx)
		}
		// The tool's limits, as a chain's step has them (tools.CallLimited); its
		// timeout is this performer's too, whose timer answers the call when it
		// passes (start, expire).
		out, err := tools.CallLimited(ctx, t, name, tools.Call{Key: req.Tool.Key, Arguments: req.Tool.Arguments, Agent: req.Agent, Outward: req.Outward})
		rep := messages.EffectReply{Output: out}
		if spent != nil {
			rep.Usage = spent()
		}
		if err != nil {
			rep.Error = err.Error()
		}
		return rep
	}
	p.failed = func(err error) messages.EffectReply {
		return messages.EffectReply{Error: tools.Truncate(err.Error(), lim.MaxOutput)}
	}
	p.panicked = func(r any) error { return fmt.Errorf("%w: %v", ErrToolPanicked, r) }
	return p.withTimeoutCause()
}

// performerOf returns the performer of req, or the error that answers it.
func (e *LocalEffects) performerOf(req messages.EffectRequest) (*performer, error) {
	switch {
	case req.Model != nil:
		if e.model == nil {
			return nil, ErrNoModel
		}
		return e.model, nil
	case req.Tool != nil:
		p, ok := e.tools[req.Tool.Tool]
		if !ok {
			p, ok = e.catalogPerformer(req.Tool.Tool)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchTool, req.Tool.Tool)
		}
		return p, nil
	}
	return nil, fmt.Errorf("actors: effect request %s asks for nothing this node performs", req.Key)
}

// Perform implements Effects.
func (e *LocalEffects) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	e.perform(nil, req, reply, nil, nil)
}

// Owned returns the effects of the sessions that this node may act for only while
// it owns them (a sharded node's own sessions, under the lease of their
// partitions). Each of their calls is claimed as it is requested: claim, given the
// call's session, returns the check the call makes (with its context) on its
// goroutine as it is about to start, after its wait in its performer's queue, not
// only as it is requested; the check can so tell whether the node still holds the
// very lease the call was requested under, not only the session's partition (a
// call queued while the node lost the partition and took it again under a new
// lease, its session stopped meanwhile, is not its session's any more). A nil
// check leaves the call unchecked. Before, a call requested while the node owned
// its session, then queued behind the performer's concurrency bound (or requested
// just before the process froze past the group's session timeout), started once a
// slot was free (or the process woke up) although another node had taken the
// session over meanwhile and performed it under the same key. A check may wait
// (while the node confirms its ownership); an error drops the call unstarted and
// unanswered, as if the node had died (the session's next owner issues it again
// under its key), frees its slot and forgets its key. A request that joins a
// performance of its key already under way, or answered, is not asked again; one
// that joins a call not started yet is: its check, the latest claimed, replaces
// the call's, and a call that a request of no check (Perform, PerformWhile)
// joined before it started is performed for that one, whatever its check says.
func (e *LocalEffects) Owned(claim func(sessionID string) (check func(ctx context.Context) error)) Effects {
	return ownedEffects{e: e, claim: claim}
}

// ownedEffects are LocalEffects whose calls start only while the checks claim
// returns say so (Owned).
type ownedEffects struct {
	e     *LocalEffects
	claim func(sessionID string) func(ctx context.Context) error
}

// Perform implements Effects.
func (o ownedEffects) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	o.e.perform(nil, req, reply, nil, o.claim(req.SessionID))
}

// Cancel implements Effects.
func (o ownedEffects) Cancel(key messages.EffectKey) { o.e.Cancel(key) }

// PerformWhile performs req as Perform does, as long as ctx lasts until its call
// starts: a call that waits in its performer's queue (past the performer's
// concurrency bound) when ctx ends, or when ctx has ended already, is never started
// here; it is dropped, forgotten, and withdrawn is called instead of reply. A node
// serving another's request uses it to leave a request whose partition it is giving
// up to the partition's next owner, which performs it once. A call that started
// runs on, to its answer or its timeout, and a request that joins a performance of
// its key already under way waits for it as with Perform. A queued call that other
// requests of its key joined is not dropped: it is performed for them. A nil ctx
// never ends.
func (e *LocalEffects) PerformWhile(ctx context.Context, req messages.EffectRequest, reply func(messages.EffectReply), withdrawn func()) {
	e.perform(ctx, req, reply, withdrawn, nil)
}

// perform is PerformWhile, whose call asks owned (when set) as it is about to
// start (Owned).
func (e *LocalEffects) perform(ctx context.Context, req messages.EffectRequest, reply func(messages.EffectReply), withdrawn func(), owned func(context.Context) error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.evict(time.Now())
	if f, ok := e.flights[req.Key]; ok {
		if !f.done {
			f.waiters.more = append(f.waiters.more, reply)
			if c := e.checks[f]; c != nil {
				if owned == nil {
					c.served.more = append(c.served.more, reply)
				} else {
					c.check = owned
					c.claims++
				}
			}
			e.mu.Unlock()
			e.cfg.OnRepeat()
			return
		}
		rep := f.rep
		e.mu.Unlock()
		e.cfg.OnRepeat()
		reply(rep)
		return
	}
	if ctx != nil && ctx.Err() != nil {
		e.mu.Unlock()
		withdrawn()
		return
	}
	p, err := e.performerOf(req)
	if err != nil {
		e.mu.Unlock()
		reply(answer(req, messages.EffectReply{Error: err.Error()}))
		return
	}
	f := &flight{key: req.Key, req: req, p: p, waiters: waiters{first: reply}}
	e.add(f)
	if owned != nil {
		e.checks[f] = &ownedCheck{check: owned}
	}
	if p.running < p.limit {
		e.start(f)
	} else {
		p.queue = append(p.queue, f)
		if ctx != nil {
			e.whiles[f] = &queuedWhile{ctx: ctx, withdrawn: withdrawn,
				unwatch: context.AfterFunc(ctx, func() { e.withdraw(f) })}
		}
	}
	e.mu.Unlock()
}

// withdraw drops f, a call of PerformWhile whose context ended, if it still waits
// in its performer's queue for nobody else, and tells its caller.
func (e *LocalEffects) withdraw(f *flight) {
	e.mu.Lock()
	if e.closed || e.whiles[f] == nil || len(f.waiters.more) > 0 {
		e.mu.Unlock()
		return
	}
	f.p.queue = slices.DeleteFunc(f.p.queue, func(q *flight) bool { return q == f })
	withdrawn := e.dropWithdrawn(f)
	e.mu.Unlock()
	withdrawn()
}

// dropWithdrawn forgets f, a queued call of PerformWhile out of its performer's
// queue, and returns the function that tells its caller. The caller holds e.mu.
func (e *LocalEffects) dropWithdrawn(f *flight) (withdrawn func()) {
	if e.flights[f.key] == f {
		delete(e.flights, f.key)
	}
	withdrawn = e.whiles[f].withdrawn
	delete(e.whiles, f)
	f.req, f.waiters = messages.EffectRequest{}, waiters{}
	return withdrawn
}

// checkOf returns the ownership check of f (Owned), a call about to start: nil
// when it has none. The caller holds e.mu.
func (e *LocalEffects) checkOf(f *flight) *ownedCheck {
	if len(e.checks) == 0 {
		return nil
	}
	return e.checks[f]
}

// unqueued clears the watch of f's PerformWhile context as f leaves its
// performer's queue to start or to be answered. The caller holds e.mu.
func (e *LocalEffects) unqueued(f *flight) {
	if len(e.whiles) == 0 {
		return
	}
	if q := e.whiles[f]; q != nil {
		q.unwatch()
		delete(e.whiles, f)
	}
}

// answer stamps a reply with its request's session and key.
func answer(req messages.EffectRequest, rep messages.EffectReply) messages.EffectReply {
	rep.SessionID, rep.Key = req.SessionID, req.Key
	return rep
}

// start runs f on a worker goroutine (workers), under a context Cancel and Close can
// end, once its ownership check (when it has one) let it (Owned). The caller holds
// e.mu, and f's performer has a free slot.
func (e *LocalEffects) start(f *flight) {
	p, req := f.p, f.req
	p.running++
	// One context per call, whose cause says why it ended; it reports the deadline of
	// the timeout, which ends it through the timer.
	// Not derived from a context of e's that Close would cancel: that would register
	// each call with it, a map's insert and delete under its lock. Close cancels the
	// running calls itself, found in their performers' lists.
	ctx, cancel := context.WithCancelCause(context.Background())
	f.cancel, f.session, f.began = cancel, req.SessionID, time.Now()
	c := &callContext{Context: ctx, deadline: f.began.Add(p.timeout), f: f, owned: e.checkOf(f)}
	if e.cfg.Trace != nil {
		c.traced, f.traced = e.cfg.Trace(c, req)
	}
	p.run(f, e)
	e.workers.Do(c)
}

// callContext is a call's context: a context.WithCancelCause that reports the
// deadline a timer enforces, as context.WithDeadlineCause would, without a second
// context. It is also the job of the worker that performs the call (run): one
// object per call for both.
type callContext struct {
	context.Context
	deadline time.Time
	f        *flight
	// traced, when set, is the context the call runs under instead
	// (LocalEffectsConfig.Trace).
	traced context.Context
	// owned, when set, says whether the call may still start (Owned).
	owned *ownedCheck
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// run performs the call on its worker goroutine (start), and answers it. The
// flight's request is this goroutine's from start on: it lets go of it as it
// returns, so that a remembered answer does not keep it.
func (c *callContext) run() {
	f := c.f
	p := f.p
	var call context.Context = c
	if c.traced != nil {
		call = c.traced
	}
	if c.owned != nil {
		// Here, not as it was requested: it may have waited in its performer's
		// queue, or the process may have frozen, since (Owned).
		if p.e.checked(call, f, c.owned) {
			return
		}
	}
	rep := p.e.run(call, p, f.req)
	if cause := context.Cause(c.Context); cause != nil && (rep.Error != "" || errors.Is(cause, context.DeadlineExceeded)) {
		// The call failed because its context ended (the timeout, Cancel, Close):
		// say why, whichever of the call and the timer answers first, with what the
		// call says it spent. An answer that came after the timeout cut the call
		// (within its grace) is no answer either: the call timed out, as it would
		// have had the timer answered first.
		failed := p.failed(cause)
		failed.Usage = rep.Usage
		rep = failed
	}
	f.req = messages.EffectRequest{}
	p.e.answer(f, rep)
}

// expire ends p's calls past their deadline with their timeout, as the end of
// their context, and answers them with it: at once, or, when p has a grace, once
// the grace has passed and the call has not answered itself (the call is abandoned
// if it ignores its context). Then it arms p's timer for the next deadline. p's
// timer calls it.
func (e *LocalEffects) expire(p *performer) {
	type expired struct {
		f      *flight
		cancel context.CancelCauseFunc
		answer bool
	}
	var due []expired
	e.mu.Lock()
	now := time.Now()
	p.armed = false
	var next time.Time // the earliest deadline still ahead
	ahead := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for f := p.oldest; f != nil; {
		later := f.nextRun
		deadline := f.began.Add(p.timeout)
		if f.overdue {
			deadline = deadline.Add(p.grace)
		}
		switch {
		case deadline.After(now):
			ahead(deadline)
			if !f.overdue {
				later = nil // the calls after it started later: none is due
			}
		case p.grace > 0 && !f.overdue:
			f.overdue = true
			due = append(due, expired{f: f, cancel: f.cancel})
			ahead(deadline.Add(p.grace))
		default:
			p.ended(f)
			due = append(due, expired{f: f, cancel: f.cancel, answer: true})
		}
		f = later
	}
	if !next.IsZero() {
		p.timer.Reset(next.Sub(now))
		p.armed = true
	}
	e.mu.Unlock()
	for _, d := range due {
		d.cancel(p.timeoutCause)
		if d.answer {
			e.answer(d.f, p.failed(p.timeoutCause))
		}
	}
}

// answer answers f with rep unless it was answered already. Whichever comes first
// answers: the call, or the end of its context (Cancel, the timeout), with its cause;
// a call that ignores its context is abandoned, and its late result dropped.
func (e *LocalEffects) answer(f *flight, rep messages.EffectReply) {
	if !f.answered.CompareAndSwap(false, true) {
		return
	}
	rep.SessionID, rep.Key = f.session, f.key
	rep.LatencyUS = time.Since(f.began).Microseconds()
	if f.traced != nil {
		f.traced(rep)
		f.traced = nil
	}
	e.finish(f, rep)
}

// run performs a call, turning a panic into an error reply.
func (e *LocalEffects) run(ctx context.Context, p *performer, req messages.EffectRequest) (rep messages.EffectReply) {
	defer func() {
		if r := recover(); r != nil {
			e.cfg.Logger.Error("effect panicked", "key", req.Key, "panic", r, "stack", string(debug.Stack()))
			rep = p.failed(p.panicked(r))
		}
	}()
	return p.perform(ctx, req)
}

// finish records f's answer, frees its slot for the next queued call and answers its
// waiters; after Close, nobody is answered.
func (e *LocalEffects) finish(f *flight, rep messages.EffectReply) {
	e.mu.Lock()
	p := f.p
	p.running--
	// The remembered answer does not keep the call's context (and its done channel).
	cancel := f.cancel
	f.cancel = nil
	p.ended(f)
	if e.closed {
		e.mu.Unlock()
		cancel(nil)
		return
	}
	withdrawn := e.startQueued(p)
	waiters := e.done(f, rep)
	e.mu.Unlock()
	cancel(nil)
	for _, w := range withdrawn {
		w()
	}
	waiters.answer(rep)
}

// startQueued starts p's queued calls while it has free slots, and returns the
// functions that tell the callers of those it dropped instead that they were. The
// caller holds e.mu.
func (e *LocalEffects) startQueued(p *performer) (withdrawn []func()) {
	for p.running < p.limit && len(p.queue) > 0 {
		next := p.queue[0]
		p.queue = p.queue[1:]
		if q := e.whiles[next]; q != nil && q.ctx.Err() != nil && len(next.waiters.more) == 0 {
			// Its caller gave it up while it waited (PerformWhile), and its
			// watch may not have dropped it yet: it never starts.
			withdrawn = append(withdrawn, e.dropWithdrawn(next))
			continue
		}
		e.unqueued(next)
		e.start(next)
	}
	return withdrawn
}

// checked runs the ownership check c of f, about to start, with the call's
// context, and reports whether f was dropped. A call the check let start, or
// joined by requests of no check (c.served), goes on; those are all it answers
// then. A call that failed its check is abandoned, unless a request claimed
// later joined it meanwhile: its check is asked then.
func (e *LocalEffects) checked(ctx context.Context, f *flight, c *ownedCheck) (dropped bool) {
	e.mu.Lock()
	check, claims := c.check, c.claims
	e.mu.Unlock()
	why := check(ctx)
	e.mu.Lock()
	for why != nil && c.claims != claims {
		check, claims = c.check, c.claims
		e.mu.Unlock()
		why = check(ctx)
		e.mu.Lock()
	}
	if e.checks[f] == c {
		delete(e.checks, f)
	}
	if why == nil {
		e.mu.Unlock()
		return false
	}
	if c.served.first != nil || len(c.served.more) > 0 {
		if !f.done {
			f.waiters = c.served
		}
		e.mu.Unlock()
		e.cfg.Logger.Warn("effect started for the requests of other nodes only: its session's node no longer owns it, or may not", "key", f.key, "err", why)
		return false
	}
	e.abandon(f, why)
	return true
}

// abandon drops f, a call whose session this node no longer owns (or may not) as
// it was about to start (Owned, why): it is not performed and nobody is answered,
// as if the node had died; its slot goes to the next queued call, and its key is
// forgotten, so that a later request for it (the session back on this node)
// performs it. A call answered meanwhile (its timeout, Cancel) stays answered.
// The caller holds e.mu, which abandon releases.
func (e *LocalEffects) abandon(f *flight, why error) {
	if !f.answered.CompareAndSwap(false, true) {
		e.mu.Unlock()
		return
	}
	traced := f.traced
	f.traced = nil
	p := f.p
	p.running--
	cancel := f.cancel
	f.cancel = nil
	p.ended(f)
	if e.flights[f.key] == f {
		delete(e.flights, f.key)
	}
	f.req, f.waiters = messages.EffectRequest{}, waiters{}
	var withdrawn []func()
	if !e.closed {
		withdrawn = e.startQueued(p)
	}
	e.mu.Unlock()
	e.cfg.Logger.Warn("effect not started: its session's node no longer owns it, or may not", "key", f.key, "err", why)
	if traced != nil {
		traced(messages.EffectReply{SessionID: f.session, Key: f.key, Error: why.Error()})
	}
	cancel(why)
	for _, w := range withdrawn {
		w()
	}
}

// done marks f answered with rep, remembers it, and returns its waiters. The caller
// holds e.mu. Only the reply is to be kept (a model call's request holds the whole
// conversation): a call that started lets go of its request as it returns
// (flight.run), and the caller drops that of one that never started.
func (e *LocalEffects) done(f *flight, rep messages.EffectReply) waiters {
	f.done, f.rep = true, rep
	w := f.waiters
	f.waiters = waiters{}
	e.remember(f, time.Now())
	return w
}

// add registers f under its key. The caller holds e.mu.
func (e *LocalEffects) add(f *flight) {
	e.flights[f.key] = f
	e.peak = max(e.peak, len(e.flights))
}

// remember appends the answered flight f to the remembered ones, then drops the
// oldest past the bounds. The caller holds e.mu.
func (e *LocalEffects) remember(f *flight, now time.Time) {
	f.began, f.size = now, answerSize(f.rep)
	if e.newest == nil {
		e.oldest = f
	} else {
		e.newest.newer = f
	}
	e.newest = f
	e.kept++
	e.bytes += f.size
	e.evict(now)
}

// answerSize approximates the memory a remembered answer holds: its strings, plus a
// fixed cost for the flight, the reply, the message and their place in the map.
func answerSize(rep messages.EffectReply) int {
	n := 512 + 2*len(rep.Key.SessionID) + len(rep.SessionID) + len(rep.Output) + len(rep.Model) + len(rep.Error)
	if m := rep.Message; m != nil {
		n += 96 + len(m.Content) + len(m.Name) + len(m.ToolCallID)
		for _, c := range m.ToolCalls {
			n += 64 + len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

// evict drops the oldest remembered answers while they are past Remember at now or
// over MaxRemembered or MaxRememberedBytes, each in O(1); then it gives back the
// memory of a map that shrank to a quarter of its peak. Flights queued or running are
// not in the list: they are never dropped. The caller holds e.mu.
func (e *LocalEffects) evict(now time.Time) {
	for f := e.oldest; f != nil; f = e.oldest {
		if e.kept <= e.cfg.MaxRemembered && e.bytes <= e.cfg.MaxRememberedBytes && now.Sub(f.began) <= e.cfg.Remember {
			break
		}
		e.oldest, f.newer = f.newer, nil
		if e.oldest == nil {
			e.newest = nil
		}
		e.kept--
		e.bytes -= f.size
		if e.flights[f.key] == f {
			delete(e.flights, f.key)
		}
	}
	if e.peak >= 1024 && len(e.flights) <= e.peak/4 {
		// Not maps.Clone: it copies the map's tables, and so its size.
		flights := make(map[messages.EffectKey]*flight, len(e.flights))
		for k, f := range e.flights {
			flights[k] = f
		}
		e.flights, e.peak = flights, len(flights)
	}
}

// Cancel implements Effects. A key this node has not seen is remembered as
// cancelled (for Remember): a request that arrives after its cancellation, as one
// from another node may, is answered cancelled without being performed.
func (e *LocalEffects) Cancel(key messages.EffectKey) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	now := time.Now()
	e.evict(now)
	cancelled := messages.EffectReply{SessionID: key.SessionID, Key: key, Error: ErrEffectCancelled.Error()}
	f, ok := e.flights[key]
	switch {
	case !ok:
		f = &flight{key: key, done: true, rep: cancelled}
		e.add(f)
		e.remember(f, now)
	case f.done:
	case f.cancel != nil:
		// The call's context ends, and the call is answered with why.
		f.cancel(ErrEffectCancelled)
		e.mu.Unlock()
		e.answer(f, f.p.failed(ErrEffectCancelled))
		return
	default:
		f.p.queue = slices.DeleteFunc(f.p.queue, func(q *flight) bool { return q == f })
		e.unqueued(f)
		delete(e.checks, f)
		f.req = messages.EffectRequest{}
		waiters := e.done(f, cancelled)
		e.mu.Unlock()
		waiters.answer(cancelled)
		return
	}
	e.mu.Unlock()
}

// Known reports whether a performance of key is running, queued or remembered here.
func (e *LocalEffects) Known(key messages.EffectKey) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.flights[key]
	return ok
}

// Len reports how many keys are remembered (answered or cancelled), queued or being
// performed.
func (e *LocalEffects) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.flights)
}

// Expire drops the answers and cancellations older than Remember at now. Requests
// drop them too as they come; a node calls Expire periodically so that they also go
// when no request comes.
func (e *LocalEffects) Expire(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evict(now)
}

// Close cancels every call in flight (their context's cause is ErrEffectsClosed) and
// drops the queued ones, unanswered; later requests are not performed. It does not
// wait for the calls to return. It is idempotent.
func (e *LocalEffects) Close() error {
	e.mu.Lock()
	e.closed = true
	var running []context.CancelCauseFunc
	closing := func(p *performer) {
		p.queue = nil
		for f := p.oldest; f != nil; f = f.nextRun {
			running = append(running, f.cancel)
		}
	}
	if e.model != nil {
		closing(e.model)
	}
	for _, p := range e.tools {
		closing(p)
	}
	for _, p := range e.catalog {
		closing(p)
	}
	for _, q := range e.whiles {
		q.unwatch()
	}
	clear(e.whiles)
	clear(e.checks)
	e.mu.Unlock()
	for _, cancel := range running {
		cancel(ErrEffectsClosed)
	}
	return nil
}

// EffectsByKind sends model calls to Model and every other effect to Tools: a node
// without the models or the tools role performs one kind itself (LocalEffects) and
// asks the nodes with the role for the other (BusEffects).
type EffectsByKind struct {
	Model, Tools Effects
}

var _ Effects = EffectsByKind{}

// Perform implements Effects.
func (e EffectsByKind) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	if req.Model != nil {
		e.Model.Perform(req, reply)
		return
	}
	e.Tools.Perform(req, reply)
}

// Cancel implements Effects: the key is cancelled wherever it runs.
func (e EffectsByKind) Cancel(key messages.EffectKey) {
	e.Model.Cancel(key)
	if e.Tools != e.Model {
		e.Tools.Cancel(key)
	}
}

// MaxModelError bounds, in bytes, the error of a model call as its reply carries
// it (EffectReply.Error): a longer one is its head and a note (tools.Truncate). The
// reply is recorded in the session's events and read from there by the task's
// failure, a team's re-dispatch note and a parent's delegate result, where a
// model a program brings (or a chain of providers, their errors joined) could
// put megabytes. A tool's error is bounded alike, by its MaxOutput.
const MaxModelError = 64 << 10

// modelError is msg within MaxModelError bytes.
func modelError(msg string) string {
	const note = 128 // room for tools.Truncate's note
	if len(msg) <= MaxModelError {
		return msg
	}
	return tools.Truncate(msg, MaxModelError-note)
}
