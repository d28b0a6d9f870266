package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/tools"
)

// How New builds a node: openLog → openBus → newActorSystem → newEffects →
// newSessionHost → newRouter, which attaches the handlers roleHandlers names for the
// node's roles. Each step leaves what it built in the Node, for Close to undo.

// wiring is what decides which handlers a node attaches: its roles, and the
// subscribers its bus has.
type wiring struct {
	roles Role
	bus   *Bus
	// memory: the node has agent memory, knowledge bases or notes, whose commands
	// (a notes change is one) it sends to the namespaces', the bases' and the notes
	// streams' owners on a shared bus, and whose replies it reads.
	memory bool
}

// runsSessions: the node consumes troupe.tasks and runs session actors.
func (w wiring) runsSessions() bool { return w.roles.Has(RoleSessions) }

// servesTools and servesModels: the node serves other nodes' effect requests of
// the kind, on a shared bus that consumes their topic.
func (w wiring) servesTools() bool {
	return w.bus != nil && w.roles.Has(RoleTools) && w.bus.Tools != nil
}
func (w wiring) servesModels() bool {
	return w.bus != nil && w.roles.Has(RoleModels) && w.bus.Models != nil
}

// servesEffects: the node serves effect requests of some kind, so it also reads
// their cancellations.
func (w wiring) servesEffects() bool { return w.servesTools() || w.servesModels() }

// asksRemote: the node runs sessions but lacks the tools or the models role, so it
// asks nodes that have it over the bus, and reads their replies.
func (w wiring) asksRemote() bool {
	return w.runsSessions() && (!w.roles.Has(RoleTools) || !w.roles.Has(RoleModels))
}

// sharedBus: the node runs on a shared bus (Kafka), where its watchers' sessions
// may run on other nodes.
func (w wiring) sharedBus() bool { return w.bus != nil }

// roleHandler is a handler of a node's router: its name, the topic it consumes,
// whether it admits new work, when a node attaches it, the subscriber it reads and
// how it handles a message.
type roleHandler struct {
	name, topic string
	// admits: the handler takes new work (a task, an effect to perform for another
	// node). Close stops these first, and keeps the others, which carry the answers
	// to the calls in flight, running while it drains the sessions (stopAdmitting).
	admits bool
	when   func(wiring) bool
	sub    func(*Node) message.Subscriber
	handle func(*Node, *message.Message) error
}

// tasksHandler is the name of the handler of messages.TopicTasks.
const tasksHandler = "tasks"

// roleHandlers says which handlers a node attaches, by its roles (wiring): the one
// table of them.
var roleHandlers = []roleHandler{
	// Many tasks at once, one session's in order (ingest.go).
	{tasksHandler, messages.TopicTasks, true, wiring.runsSessions,
		func(n *Node) message.Subscriber { return &sessionOrder{sub: n.tasksSub, ackOnArrival: n.bus != nil} },
		(*Node).handleTask},
	{"tool-requests", messages.TopicToolRequests, true, wiring.servesTools,
		func(n *Node) message.Subscriber { return n.cfg.Bus.Tools }, (*Node).handleEffect},
	{"model-requests", messages.TopicModelRequests, true, wiring.servesModels,
		func(n *Node) message.Subscriber { return n.cfg.Bus.Models }, (*Node).handleEffect},
	// The cancellations of the effects this node performs for others, which run
	// while it closes until its sessions drained.
	{"effect-cancels", messages.TopicEffectCancels, false, wiring.servesEffects, (*Node).live, (*Node).handleEffectCancel},
	// The answers to the effects and memory commands this node's sessions asked
	// other nodes for, which their drain waits for.
	{"replies", messages.TopicReplies, false, func(w wiring) bool { return w.asksRemote() || w.sharedBus() && w.memory }, (*Node).live, (*Node).handleReply},
	// No handler reads messages.TopicEvents: the session actors feed the hub
	// themselves (SessionDeps.Live), and the hub reads the topic only while someone
	// here watches a session another node runs (Hub, busFeed).
}

// live is the subscriber of the node's live topics (Bus.Live).
func (n *Node) live() message.Subscriber { return n.liveSub }

func (n *Node) wiring() wiring {
	return wiring{roles: n.cfg.Roles, bus: n.cfg.Bus, memory: n.cfg.Memory != nil || n.cfg.Knowledge != nil || n.cfg.Notes != nil}
}

// DataLockWait is the Config.LockWait of a server: long enough for the node before
// it to stop, short enough that a node that does not stop is reported.
const DataLockWait = 30 * time.Second

// openLog opens the embedded SQLite log in DataDir unless Config.Log gives one.
func (n *Node) openLog(ctx context.Context) error {
	if n.log != nil {
		return nil
	}
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: n.cfg.DataDir, LockWait: n.cfg.LockWait, Logger: n.cfg.Logger})
	if err != nil {
		return err
	}
	n.log, n.ownLog = l, true
	return nil
}

// openBus takes Config.Bus, or makes the embedded bus.
func (n *Node) openBus(wlog watermill.LoggerAdapter) {
	if b := n.cfg.Bus; b != nil {
		n.metrics.Registry.MustRegister(newBusLag(b.Tasks, b.Live, b.Tools, b.Models))
		n.pub, n.tasksSub, n.liveSub = b.Publisher, b.Tasks, b.Live
		if b.Live != nil {
			n.hub = newHub(b.Live, n.runsHere)
			n.hub.load = n.eventAt
			newClusterDeltas(n.hub, b.Publisher, b.Live, n.cfg.NodeID, n.cfg.Roles.Has(RoleModels), b.Partition, n.cfg.Logger)
		}
		return
	}
	n.bus = NewEmbeddedBus(wlog)
	n.pub, n.tasksSub, n.liveSub = n.bus, n.bus, n.bus
}

func (n *Node) newActorSystem() {
	actorLogger := slog.New(deadLetters{n.cfg.Logger.Handler()})
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLogger }))
	actorRestarts(n.metrics.Registry, n.system, n.cfg.Logger, n.redactor)
}

// newEffects builds the gateway in front of the configured models and the effects
// the node's sessions use. The node's own sessions and the requests it serves for
// other nodes share its LocalEffects, so a key is performed once on the node; a node
// without the tools or models role asks the nodes that have it, over the bus.
func (n *Node) newEffects(reg *tools.Registry) (actors.Effects, error) {
	cfg := n.cfg
	gwCfg := cfg.Gateway
	// A model without native tools always speaks the text protocol; one with them
	// does when a request asks (an agent of the react paradigm).
	speaking := func(models []llm.Model) []llm.Model {
		out := make([]llm.Model, len(models))
		for i, m := range models {
			out[i] = react.Wrap(m, react.Options{OnRequest: llm.CapabilitiesOf(m).NativeTools})
		}
		return out
	}
	gwCfg.Chain = speaking(append([]llm.Model{cfg.Model}, cfg.Fallbacks...))
	// Each agent with a model of its own has a chain of its own, which its requests
	// name (llm.Request.Models).
	gwCfg.Routes = slices.Clone(gwCfg.Routes)
	for _, a := range cfg.Agents {
		if a.Model != nil {
			gwCfg.Routes = append(gwCfg.Routes, speaking(append([]llm.Model{a.Model}, a.Fallbacks...)))
		}
		if a.CriticModel != nil { // a reflection's critic, a chain of one
			gwCfg.Routes = append(gwCfg.Routes, speaking([]llm.Model{a.CriticModel}))
		}
		if a.SummaryModel != nil { // its compression's summaries, a chain of one
			gwCfg.Routes = append(gwCfg.Routes, speaking([]llm.Model{a.SummaryModel}))
		}
	}
	if gwCfg.Logger == nil {
		gwCfg.Logger = cfg.Logger
	}
	if gwCfg.Tokenizer == nil {
		// cl100k_base, as gateway.LazyTiktoken counts it by default; both count
		// with pipelines/bpe, in O(n log n) (tiktoken-go's merges are quadratic in
		// a long unbroken piece: a prompt of 300 KB of '<' took minutes).
		gwCfg.Tokenizer = &rag.Cl100k{}
	}
	gwCfg.Retry.OnRetry = n.countRetries(gwCfg.Retry.OnRetry)
	gwCfg.Retry.OnCooldown = n.countCooldowns(gwCfg.Retry.OnCooldown)
	gw, err := gateway.New(gwCfg)
	if err != nil {
		return nil, err
	}
	n.gw = gw
	n.tracing.setProviders(cfg)
	n.local = actors.NewLocalEffects(actors.LocalEffectsConfig{Model: gw, Tools: reg, Catalog: cfg.ToolCatalog, Remember: cacheTTL,
		ModelTimeout: cfg.ModelTimeout, ToolTimeout: cfg.ToolTimeout, OnRepeat: n.metrics.effectHits.Inc, Logger: cfg.Logger,
		ModelDeltas: n.modelDeltas, Trace: n.tracing.effectHook()})
	// The node's own sessions' calls start only while it holds the lease of their
	// partitions they were requested under (claimCall); the requests it serves
	// for other nodes are fenced by their own groups (servedHandoff).
	var own actors.Effects = n.local
	if n.sharded() {
		own = n.local.Owned(n.claimCall)
	}
	if !n.wiring().asksRemote() {
		if n.hub.cluster != nil && n.wiring().runsSessions() {
			return streamingRequests{Effects: own, hub: n.hub, local: true}, nil // deltas_cluster.go
		}
		return own, nil
	}
	// A reply published before the replies' subscription is positioned (it reads
	// from the latest offset, once the router runs) would be lost, and its call
	// would wait for ever: requests wait for the router.
	n.remote = actors.NewBusEffects(actors.BusEffectsConfig{Publisher: n.pub, NodeID: cfg.NodeID, Logger: cfg.Logger,
		Inject: n.tracing.injectHook(), MaxMessage: effectMessageMax, Ready: n.routing,
		Reissue: cfg.EffectReissue, ReissueMargin: DefaultReissueMargin, Tools: reg, OnReissue: n.metrics.reissued.Inc, RunsHere: n.reissuesOf(),
		Store: func(ctx context.Context, key messages.EffectKey, command []byte) (string, error) {
			return n.storeEffect(ctx, messages.BusStoredRequest, key, command)
		}})
	byKind := actors.EffectsByKind{Model: own, Tools: own}
	if n.hub.cluster != nil {
		byKind.Model = streamingRequests{Effects: own, hub: n.hub, local: true}
	}
	if !cfg.Roles.Has(RoleModels) {
		byKind.Model = streamingRequests{Effects: n.remote, hub: n.hub} // deltas_cluster.go
	}
	if !cfg.Roles.Has(RoleTools) {
		byKind.Tools = delegatesHere{here: own, rest: n.remote}
	}
	return byKind, nil
}

// delegatesHere performs a session's delegate calls on the session's own node and
// asks the nodes that serve tools for its other tool calls. A delegate call is no
// tool's work: it submits its child's task and waits for the child, which runs on
// whichever node owns the child's partition. Sent to a tools node, it held that
// node's partition of the tool requests (one request at a time each) until the
// child ended: a team's fan-out branches ran one after the other, and a child whose
// own tool calls fell on that partition waited behind its parent's call, which
// waited for it, until the call's 31-minute timeout.
type delegatesHere struct{ here, rest actors.Effects }

var _ actors.Effects = delegatesHere{}

// Perform implements actors.Effects.
func (d delegatesHere) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	if req.Tool != nil && req.Tool.Tool == DelegateTool {
		d.here.Perform(req, reply)
		return
	}
	d.rest.Perform(req, reply)
}

// Cancel implements actors.Effects: the key is cancelled wherever it runs.
func (d delegatesHere) Cancel(key messages.EffectKey) {
	d.here.Cancel(key)
	d.rest.Cancel(key)
}

// reissuesOf says which sessions' unanswered remote effects BusEffects publishes
// again: on a sharded node, those of the sessions of its partitions (one that moved
// is stopped here, and its next owner issues its effects again); else all.
func (n *Node) reissuesOf() func(sessionID string) bool {
	if !n.sharded() {
		return nil
	}
	return n.runsHere
}

// newSessionHost spawns the session host, whose session actors append to the log
// (under the partitions' lease, on a sharded node whose log fences) and publish
// through the outbox.
func (n *Node) newSessionHost(agents actors.Agents, effects actors.Effects) error {
	cfg := n.cfg
	n.outbox = newOutbox(n.pub, 8192, cfg.Logger, n.metrics.pubFailed.Inc)
	n.outbox.notCreated = n.metrics.replyRefused.Inc
	store := n.sessionStore()
	n.metrics.sessions.runAgents(agents)
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "sessions",
		Name: "evicted_total", Help: "Idle session actors passivated before their idle timeout to keep within MaxLiveSessions."})
	overLimit := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "sessions",
		Name: "over_limit_total", Help: "Session actors started past MaxLiveSessions because every live one was busy (the bound is soft)."})
	n.metrics.Registry.MustRegister(evicted, overLimit)
	deps := actors.SessionDeps{
		Store: store, Configs: n.log, Publisher: n.outbox, Effects: effects, Clock: cfg.Clock,
		MaxLiveSessions: cfg.MaxLiveSessions, MaxQueuedTasks: max(cfg.MaxQueuedTasks, 0), OnSessionEvicted: evicted.Inc, OnSessionsOverLimit: overLimit.Inc,
		MaxParallelTools: cfg.parallelTools(), IdleTimeout: cfg.IdleTimeout, Logger: cfg.Logger,
		Redactor: n.redactor, Stopping: n.sessionsStop, Routable: n.routable,
		Agent: agents.Default, Named: agents.Named, Rules: agents.Rules,
		LogWrites: n.outage.wrote,
	}
	deps.Live, deps.Recovered = n.sessionEvents, n.metrics.sessions.recovered
	// The log itself keeps the sessions' fold snapshots (SQLite, ClickHouse),
	// past the wrappers of store.
	deps.Snapshots = n.snapshots()
	if n.parentEnds != nil {
		// The late answers a session's failed tasks wait for (lateanswers.go).
		deps.LateCalls = n.parentEnds.recovered
	}
	if n.sharded() {
		// What this process published needs no republishing at a rebalance
		// (published.go).
		deps.Published = n.published.covers
		// Nor does what a takeover found on the bus (onbus.go).
		deps.OnBus = n.onBus.covers
		live := deps.Live
		deps.Live = func(sessionID string, events []messages.Envelope) {
			if len(events) > 0 {
				n.published.record(sessionID, events[len(events)-1].Seq)
			}
			live(sessionID, events)
		}
	}
	if n.leased != nil && n.leased.epochs != nil {
		// A session starting on a partition another node took meanwhile folds that
		// node's history: it stops before it re-issues its effects (stillOwned).
		deps.StillOwned = n.leased.stillOwned
	}
	if n.leased != nil && n.leased.releasing != nil {
		// Publication marks (pubmark.go): what the sessions are appending and
		// publishing, and a mark of what they published every interval.
		n.marks.clock = cfg.Clock
		deps.Stamping, deps.Handed = n.marks.stamping, n.marks.handed
		if cfg.PublishMarkInterval > 0 {
			go n.markEvery(cfg.PublishMarkInterval)
		}
	}
	if n.tracing.on() {
		deps.Live = n.tracing.observe(deps.Live)
		deps.Recovered = func(sessionID string, events []messages.Envelope) {
			n.metrics.sessions.recovered(sessionID, events)
			n.tracing.spans.Recover(sessionID, events)
		}
	}
	var err error
	n.host, err = n.system.Root.SpawnNamed(actors.NewSessionHostProps(deps), "sessions")
	if err != nil {
		return fmt.Errorf("node: spawn session host: %w", err)
	}
	if n.sharded() {
		// A sharded node owns no session until Kafka assigns it partitions.
		if _, err := n.system.Root.RequestFuture(n.host, &actors.SetOwnership{Owns: func(string) bool { return false }}, cfg.SubmitTimeout).Result(); err != nil {
			return err
		}
	}
	n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "sessions",
		Name: "live", Help: "Session actors alive on this node (an idle one passivates after IdleTimeout; NaN when the host does not answer)."},
		n.liveSessions),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "dedupe_ids", Help: "Handled bus message IDs remembered to skip redeliveries (bounded; forgotten after 10 minutes)."},
			func() float64 { return float64(n.dedupe.size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "effects",
			Name: "answers_kept", Help: "Effect answers and cancellations remembered (or being performed) to answer a repeated request by key (bounded in number and size; forgotten after 10 minutes)."},
			func() float64 { return float64(n.local.Len()) }))
	return nil
}

// sessionStore returns the session actors' event store: the log, under the
// partitions' lease on a sharded node whose log fences (leasedStore), with each
// append's latency observed. Where the log claims sessions (eventlog.Claiming), so
// does the store (actors.ClaimingStore), under the lease if there is one.
func (n *Node) sessionStore() actors.EventStore {
	cfg := n.cfg
	var store actors.EventStore = n.log
	if f, ok := n.log.(eventlog.Fencing); ok && n.sharded() {
		n.leased = &leasedStore{Log: n.log, n: n, fencing: f}
		n.leased.releasing, _ = n.log.(eventlog.Releasing)
		n.leased.epochs, _ = n.log.(eventlog.EpochReading)
		store = n.leased
		if c, ok := n.log.(eventlog.Claiming); ok {
			store = leasedClaims{leasedStore: n.leased, claims: c}
		}
	} else if n.sharded() {
		cfg.Logger.Warn("the event log does not fence stale partition owners: a node that hangs past the group's session timeout may write beside its partitions' next owner",
			"log", fmt.Sprintf("%T", n.log))
	}
	backend := any(n.log)
	if n.owner != nil {
		backend = n.owner.log
	}
	return timed(store, n.metrics.appends.WithLabelValues(logBackend(backend)))
}

// newRouter builds the bus router with its middleware and attaches the handlers
// roleHandlers names for the node's roles.
func (n *Node) newRouter(wlog watermill.LoggerAdapter) error {
	var err error
	n.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: routerCloseTimeout}, wlog)
	if err != nil {
		return err
	}
	// Middleware, outermost first: observe, poison (permanent failures, with the
	// reason in the message's metadata), retry (transient failures, with backoff),
	// deduplicate by message ID, and recover panics into errors.
	n.poisoned = newPoisonedRecords()
	poison, err := middleware.PoisonQueueWithFilter(poisonPublisher{Publisher: n.pub, m: n.metrics, handler: "tasks", logger: n.cfg.Logger,
		record: n.recordCoordinates, sent: n.poisoned}, TopicPoison, isPermanent)
	if err != nil {
		return err
	}
	n.router.AddMiddleware(
		n.metrics.observe,
		poison,
		retry{max: 5, initial: 50 * time.Millisecond, most: 2 * time.Second, factor: 2,
			retryable: func(err error) bool {
				return !errors.Is(err, errPermanent) && !errors.Is(err, errStopping) && !errors.Is(err, errNotOwner) && !errors.Is(err, errHandedOver)
			},
			onRetry: n.metrics.retries.WithLabelValues("tasks").Inc,
			logger:  n.cfg.Logger}.middleware,
		n.dedupe.middleware,
		n.metrics.recoverPanics,
	)
	w := n.wiring()
	for _, h := range roleHandlers {
		if !h.when(w) {
			continue
		}
		handle, sub := h.handle, h.sub(n)
		rh := n.router.AddConsumerHandler(h.name, h.topic, sub, func(msg *message.Message) error { return handle(n, msg) })
		if h.admits {
			effects := h.topic == messages.TopicToolRequests || h.topic == messages.TopicModelRequests
			n.admitting = append(n.admitting, admittingHandler{rh, sub, effects})
		} else {
			n.answering++
		}
	}
	return nil
}

// routerCloseTimeout bounds the router's Close: its wait for the messages its
// handlers are handling. Close waits as long for the handlers that admit work to stop
// (stopAdmitting).
const routerCloseTimeout = 10 * time.Second

// admittingHandler is a handler of the router that admits new work
// (roleHandler.admits), and the subscriber it reads.
type admittingHandler struct {
	h   *message.Handler
	sub message.Subscriber
	// effects: it reads the requests of effects to perform for other nodes
	// (handleEffect), which answer before it stops.
	effects bool
}

// stopAdmitting stops the router's handlers that admit new work (tasks, effects to
// perform for other nodes) and waits for them to stop (up to routerCloseTimeout),
// while the others (the replies to this node's calls, the cancellations of the
// calls it performs) keep running: the sessions that Close drains next get the
// answers of the calls they have in flight on other nodes. A stopped handler's
// subscription ends (a consumer group's member gives its partitions up: a sharded
// node is told Revoked), but its subscriber is closed only with the router
// (closeStopped). The handlers of the effects this node performs for others stop
// once those in flight answered and their replies were published (up to
// Config.HandoffGrace, servedEffects): they keep their partitions meanwhile, so
// that no other node reads those requests again and performs them a second time.
// It reports false, and stops nothing, when the router is not running yet (Close
// then closes it, which stops a handler being started) or no handler would be left
// running (the embedded bus: the router is closed at once, as it was).
func (n *Node) stopAdmitting() bool {
	if n.answering == 0 || !n.routerRunning() {
		return false
	}
	effects := false
	for _, a := range n.admitting {
		if a.effects {
			effects = true
		} else {
			a.h.Stop()
		}
	}
	if effects {
		if out := n.served.close(n.cfg.HandoffGrace); out > 0 {
			n.cfg.Logger.Warn("node closing with effects it performs for other nodes still running past the grace; they are cancelled and performed again where their requests are read next",
				"node", n.cfg.NodeID, "effects", out, "grace", n.cfg.HandoffGrace)
		}
		for _, a := range n.admitting {
			if a.effects {
				a.h.Stop()
			}
		}
	}
	t := time.NewTimer(routerCloseTimeout)
	defer t.Stop()
	for _, a := range n.admitting {
		select {
		case <-a.h.Stopped():
		case <-t.C:
			n.cfg.Logger.Warn("node closing with a handler of new work still stopping; draining the sessions anyway",
				"node", n.cfg.NodeID, "waited", routerCloseTimeout)
			return true
		}
	}
	return true
}

// closeStopped closes the subscribers of the handlers stopAdmitting stopped, which the
// router's Close, once the sessions drained, no longer closes (it closes those of the
// handlers still running).
func (n *Node) closeStopped() error {
	var errs []error
	for _, a := range n.admitting {
		errs = append(errs, a.sub.Close())
	}
	return errors.Join(errs...)
}

// routable reports whether this node's gateway answers requests naming the chain
// models (actors.SessionDeps.Routable); a node without one (it performs no model
// calls itself) takes every chain as routable: its model nodes answer.
func (n *Node) routable(models []string) bool {
	return n.gw == nil || n.gw.Routes(models)
}

// countRetries returns the gateway's retry hook (then): it counts each model call
// sent again after a transient failure in troupe_model_retries_total, by model and
// reason, since the provider bills every attempt and the session records only the
// call's sum (its usage is every attempt's).
func (n *Node) countRetries(then func(model string, err error)) func(model string, err error) {
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "model", Name: "retries_total",
		Help: "Model calls the gateway sent again after a transient failure, by model and reason: rate_limited (429), server_error (5xx), timeout (408, or no answer in time), other (a connection cut, a stream cut short). Each attempt is billed by the provider; the session records the call once, with every attempt's usage."},
		[]string{"model", "reason"})
	n.metrics.Registry.MustRegister(retries)
	return func(model string, err error) {
		retries.WithLabelValues(model, retryReason(err)).Inc()
		if then != nil {
			then(model, err)
		}
	}
}

// countCooldowns returns the gateway's cooldown hook (then): it counts each model
// call held back by its provider's cooldown after a 429 in
// troupe_model_cooldown_holds_total, by model and what the call did: waited for
// the cooldown's end, or failed over (to the next model of its chain, or failed:
// its deadline was too near).
func (n *Node) countCooldowns(then func(model string, waited bool)) func(model string, waited bool) {
	holds := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "model", Name: "cooldown_holds_total",
		Help: "Model calls the gateway held back because their provider (base URL and key) answered 429 and asked for a wait, by model and action: waited (sent once the wait ended), failed_over (not sent: the next model of the chain took it, or the call's deadline came first)."},
		[]string{"model", "action"})
	n.metrics.Registry.MustRegister(holds)
	return func(model string, waited bool) {
		action := "failed_over"
		if waited {
			action = "waited"
		}
		holds.WithLabelValues(model, action).Inc()
		if then != nil {
			then(model, waited)
		}
	}
}

// retryReason is the reason label of troupe_model_retries_total for err.
func retryReason(err error) string {
	status := 0
	if api := (*llm.APIError)(nil); errors.As(err, &api) {
		status = api.StatusCode
	}
	switch {
	case status == 429:
		return "rate_limited"
	case status >= 500:
		return "server_error"
	case status == 408, errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}
