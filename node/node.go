package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// TopicPoison receives bus messages that could not be handled, with the reason in
// their metadata (key "reason_poisoned").
const TopicPoison = "troupe.poison"

// DefaultSystemPrompt is the default agent's system prompt.
const DefaultSystemPrompt = "You are a helpful agent running on Troupe. Use the tools when they help; answer concisely."

// Config configures a node. The zero value runs an embedded node in ./.troupe on the
// offline model with the calculator and clock tools.
type Config struct {
	// DataDir holds the embedded event log (default ./.troupe).
	DataDir string
	// Log overrides the event log; when nil, a SQLite log is opened in DataDir.
	Log eventlog.Log
	// Model answers every model call (default llm.Offline). A model that cannot call
	// tools natively is given them through the ReAct text protocol.
	Model llm.Model
	// Fallbacks are tried in order when Model fails (after its retries).
	Fallbacks []llm.Model
	// Gateway configures retries, quotas, prices and caches of model calls; its Chain
	// is made of Model and Fallbacks.
	Gateway gateway.Config
	// Tools are offered to the agent (default calculator and clock).
	Tools []tools.Tool
	// SystemPrompt opens every conversation (default DefaultSystemPrompt).
	SystemPrompt string
	// MaxSteps bounds the model calls of a task (default 10).
	MaxSteps int
	// MaxParallelTools bounds one session's tool calls in flight (default 4).
	MaxParallelTools int
	// ToolTimeout bounds one tool call (default 30 s).
	ToolTimeout time.Duration
	// ModelTimeout bounds one model call (default 2 minutes).
	ModelTimeout time.Duration
	// IdleTimeout passivates idle session actors (default 1 minute).
	IdleTimeout time.Duration
	// Secrets (API keys, tokens) are replaced by "[REDACTED]" wherever they would
	// enter an event; strings shaped like keys and bearer tokens always are.
	Secrets []string
	// Bus replaces the embedded in-process bus, e.g. with Kafka (package kafka). Nil
	// means the embedded GoChannel.
	Bus *Bus
	// SubmitTimeout bounds how long ingress waits for a task to be recorded (default 30 s).
	SubmitTimeout time.Duration
	// HandoffGrace bounds how long a sharded node that loses its partitions waits for
	// effects in flight to answer before it stops their sessions (default 5 s). Kafka
	// evicts a member that has not rejoined within its session timeout (10 s for a
	// node's groups), so keep it well below that.
	HandoffGrace time.Duration
	// NodeID names the node in a cluster: effect replies are addressed to it (default
	// host-pid, unique among live nodes).
	NodeID string
	// Roles says what the node does in a cluster (default all). A node without the
	// tools or models role sends those effects to nodes that have it, over the bus.
	Roles  Role
	Clock  actors.Clock
	IDs    actors.IDs
	Logger *slog.Logger
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Bus == nil && c.Roles != 0 && c.Roles != RoleAll {
		return errors.New("node: roles need a shared bus (Kafka); an embedded node does everything")
	}
	if c.Bus != nil && c.Bus.Sharded && c.Bus.Partition == nil {
		return errors.New("node: a sharded bus needs its Partition function")
	}
	if c.MaxSteps < 0 || c.MaxParallelTools < 0 || c.ToolTimeout < 0 || c.ModelTimeout < 0 || c.IdleTimeout < 0 {
		return errors.New("node: limits and timeouts must not be negative")
	}
	seen := map[string]bool{}
	for _, t := range c.Tools {
		n := t.Spec().Name
		if seen[n] {
			return fmt.Errorf("node: two tools are named %q", n)
		}
		seen[n] = true
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = ".troupe"
	}
	if c.Model == nil {
		c.Model = llm.Offline{}
	}
	if c.Tools == nil {
		c.Tools = []tools.Tool{tools.Calculator{}, tools.NewClock(c.Clock)}
	}
	if c.SystemPrompt == "" {
		c.SystemPrompt = DefaultSystemPrompt
	}
	if c.SubmitTimeout <= 0 {
		c.SubmitTimeout = 30 * time.Second
	}
	if c.Clock == nil {
		c.Clock = actors.SystemClock{}
	}
	if c.IDs == nil {
		c.IDs = actors.UUIDv7{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	if c.HandoffGrace <= 0 {
		c.HandoffGrace = 5 * time.Second
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = 30 * time.Second
	}
	if c.ModelTimeout <= 0 {
		c.ModelTimeout = 2 * time.Minute
	}
}

// Bus is a node's connection to a shared bus. The node closes none of it.
type Bus struct {
	Publisher message.Publisher
	// Tasks consumes messages.TopicTasks. In a cluster it is a consumer group shared by
	// the nodes, so that each session's partition, and so the session, has one owner.
	Tasks message.Subscriber
	// Live consumes messages.TopicEvents for this node's live streams (SSE, node run):
	// every partition, from the latest offset, in no consumer group. It also consumes
	// messages.TopicReplies, the answers to this node's effect requests.
	Live message.Subscriber
	// Tools and Models consume messages.TopicToolRequests and TopicModelRequests on
	// nodes with the tools or models role: each a consumer group shared by the nodes
	// with that role (a group of its own, so that tool nodes joining or leaving do not
	// move sessions). Nil disables serving that topic.
	Tools, Models message.Subscriber
	// Sharded says Tasks is a consumer group that spreads sessions over several nodes
	// sharing one event log. The node then runs only the sessions of the partitions it
	// is assigned, which the caller reports through Assigned and Revoked (the kafka
	// package's RebalanceListener), and sends cancellations to a session's owner over
	// messages.TopicTasks.
	Sharded bool
	// Partition maps a session ID to its partition of messages.TopicTasks; every
	// producer must use the same function (kafka.Partition). Required when Sharded.
	Partition func(sessionID string, partitions int) int
}

// NewEmbeddedBus returns the in-process bus of an embedded node: Watermill's GoChannel
// configured to keep per-session order. By default GoChannel hands each message to
// its own goroutine, so two messages of one session can overtake each other;
// BlockPublishUntilSubscriberAck makes Publish wait until every subscriber acked, so
// a publisher's messages arrive in the order it published them, and a nacked message
// is redelivered before the next one.
func NewEmbeddedBus(logger watermill.LoggerAdapter) *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, logger)
}

// Agent returns the agent this configuration runs: the code whose decisions replay
// verification checks against recorded sessions.
func (c Config) Agent() actors.Agent {
	c.setDefaults()
	specs := make([]messages.ToolSpec, 0, len(c.Tools))
	for _, t := range c.Tools {
		specs = append(specs, t.Spec())
	}
	return actors.Agent{Name: "default", SystemPrompt: c.SystemPrompt, Model: c.Model.Name(), Tools: specs, MaxSteps: c.MaxSteps}
}

// Node is one running Troupe node.
type Node struct {
	cfg               Config
	log               eventlog.Log
	ownLog            bool
	bus               *gochannel.GoChannel // the embedded bus, when the node owns one
	pub               message.Publisher
	tasksSub, liveSub message.Subscriber
	system            *actor.ActorSystem
	host              *actor.PID
	effect            []*actor.PID
	model, remote     *actor.PID
	toolPIDs          map[string]*actor.PID
	own               ownership
	effects           *actors.EffectResults
	dedupe            *deduplicator
	hostStopped       atomic.Bool
	outbox            *outbox
	router            *message.Router
	hub               *Hub

	redactor    *actors.SecretRedactor
	stopping    chan struct{}
	metrics     *Metrics
	ran         atomic.Bool
	streamsOnce sync.Once
	streamsDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// New builds a node. It opens (and locks) the event log; nothing runs until Run.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	n := &Node{cfg: cfg, log: cfg.Log, streamsDone: make(chan struct{}), stopping: make(chan struct{}), redactor: actors.NewSecretRedactor(cfg.Secrets...), metrics: newMetrics()}
	n.effects = actors.NewEffectResults(cacheTTL, 0, 0, n.metrics.effectHits.Inc)
	n.dedupe = newDeduplicator(n.metrics, cacheTTL, 0)
	if n.log == nil {
		l, err := sqlite.Open(ctx, sqlite.Config{Dir: cfg.DataDir})
		if err != nil {
			return nil, err
		}
		n.log, n.ownLog = l, true
	}
	wlog := watermill.NewSlogLogger(cfg.Logger)
	if cfg.Bus != nil {
		n.pub, n.tasksSub, n.liveSub = cfg.Bus.Publisher, cfg.Bus.Tasks, cfg.Bus.Live
	} else {
		n.bus = NewEmbeddedBus(wlog)
		n.pub, n.tasksSub, n.liveSub = n.bus, n.bus, n.bus
	}
	actorLogger := slog.New(deadLetters{cfg.Logger.Handler()})
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLogger }))

	agent := cfg.Agent()
	toolPIDs := map[string]*actor.PID{}
	n.toolPIDs = toolPIDs
	for _, t := range cfg.Tools {
		spec := t.Spec()
		pid, err := n.system.Root.SpawnNamed(actors.NewToolActorProps(actors.ToolActorConfig{Tool: t, Timeout: cfg.ToolTimeout, Logger: cfg.Logger}), "tool/"+spec.Name)
		if err != nil {
			return nil, n.fail(fmt.Errorf("node: spawn tool %s: %w", spec.Name, err))
		}
		toolPIDs[spec.Name] = pid
		n.effect = append(n.effect, pid)
	}
	gwCfg := cfg.Gateway
	gwCfg.Chain = nil
	for _, m := range append([]llm.Model{cfg.Model}, cfg.Fallbacks...) {
		if !llm.CapabilitiesOf(m).NativeTools {
			m = react.Wrap(m, react.Options{})
		}
		gwCfg.Chain = append(gwCfg.Chain, m)
	}
	if gwCfg.Logger == nil {
		gwCfg.Logger = cfg.Logger
	}
	if gwCfg.Tokenizer == nil {
		gwCfg.Tokenizer = &gateway.LazyTiktoken{}
	}
	gw, err := gateway.New(gwCfg)
	if err != nil {
		return nil, n.fail(err)
	}
	model, err := n.system.Root.SpawnNamed(actors.NewModelActorProps(actors.ModelActorConfig{Model: gw, Timeout: cfg.ModelTimeout, Logger: cfg.Logger}), "model")
	if err != nil {
		return nil, n.fail(fmt.Errorf("node: spawn model actor: %w", err))
	}
	n.effect = append(n.effect, model)
	n.model = model
	// The node's own sessions reach its model and tools through the per-key answers it
	// shares with the requests it serves for other nodes; a node without the tools or
	// models role asks the nodes that have it, over the bus.
	cached, err := n.system.Root.SpawnNamed(actors.NewCachedEffectsProps(actors.CachedEffectsConfig{
		Model: model, Tools: toolPIDs, Results: n.effects,
		ToolWait: cfg.ToolTimeout + effectWaitMargin, ModelWait: cfg.ModelTimeout + effectWaitMargin}), "effects")
	if err != nil {
		return nil, n.fail(fmt.Errorf("node: spawn effects cache: %w", err))
	}
	n.effect = append(n.effect, cached)
	sessionModel, sessionTools := cached, map[string]*actor.PID{}
	for name := range toolPIDs {
		sessionTools[name] = cached
	}
	if cfg.Roles.Has(RoleSessions) && (!cfg.Roles.Has(RoleTools) || !cfg.Roles.Has(RoleModels)) {
		n.remote, err = n.system.Root.SpawnNamed(actors.NewRemoteEffectsProps(actors.RemoteEffectsConfig{
			Publisher: n.pub, NodeID: cfg.NodeID, Logger: cfg.Logger}), "remote")
		if err != nil {
			return nil, n.fail(fmt.Errorf("node: spawn remote effects: %w", err))
		}
		n.effect = append(n.effect, n.remote)
		if !cfg.Roles.Has(RoleModels) {
			sessionModel = n.remote
		}
		if !cfg.Roles.Has(RoleTools) {
			sessionTools = map[string]*actor.PID{}
			for name := range toolPIDs {
				sessionTools[name] = n.remote
			}
		}
	}
	n.outbox = newOutbox(n.pub, 8192, cfg.Logger, n.metrics.pubFailed.Inc)
	n.host, err = n.system.Root.SpawnNamed(actors.NewSessionHostProps(actors.SessionDeps{
		Store: n.log, Publisher: n.outbox, Model: sessionModel, Tools: sessionTools, Clock: cfg.Clock,
		MaxParallelTools: cfg.MaxParallelTools, IdleTimeout: cfg.IdleTimeout, Logger: cfg.Logger,
		Redactor: n.redactor, Stopping: n.stopping,
		Agent: agent,
	}), "sessions")
	if err != nil {
		return nil, n.fail(fmt.Errorf("node: spawn session host: %w", err))
	}
	n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "sessions",
		Name: "live", Help: "Session actors alive on this node (an idle one passivates after IdleTimeout; NaN when the host does not answer)."},
		n.liveSessions),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "dedupe_ids", Help: "Handled bus message IDs remembered to skip redeliveries (bounded; forgotten after 10 minutes)."},
			func() float64 { return float64(n.dedupe.size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "effects",
			Name: "answers_kept", Help: "Effect answers kept (or being computed) to answer a repeated request by key (bounded; forgotten after 10 minutes)."},
			func() float64 { return float64(n.effects.Len()) }))

	n.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, wlog)
	if err != nil {
		return nil, n.fail(err)
	}
	// Middleware, outermost first: observe, poison (permanent failures, with the
	// reason in the message's metadata), retry (transient failures, with backoff),
	// deduplicate by message ID, and recover panics into errors.
	poison, err := middleware.PoisonQueueWithFilter(n.pub, TopicPoison, n.metrics.isPermanent("tasks", cfg.Logger))
	if err != nil {
		return nil, n.fail(err)
	}
	n.router.AddMiddleware(
		n.metrics.observe,
		poison,
		middleware.Retry{MaxRetries: 5, InitialInterval: 50 * time.Millisecond, MaxInterval: 2 * time.Second, Multiplier: 2,
			ShouldRetry: func(params middleware.RetryParams) bool {
				retry := !errors.Is(params.Err, errPermanent)
				if retry {
					n.metrics.retries.WithLabelValues("tasks").Inc()
				}
				return retry
			},
			Logger: wlog}.Middleware,
		n.dedupe.middleware,
		n.metrics.recoverPanics,
	)
	if n.sharded() {
		// A sharded node owns no session until Kafka assigns it partitions.
		if _, err := n.system.Root.RequestFuture(n.host, &actors.SetOwnership{Owns: func(string) bool { return false }}, cfg.SubmitTimeout).Result(); err != nil {
			return nil, n.fail(err)
		}
	}
	if cfg.Roles.Has(RoleSessions) {
		n.router.AddConsumerHandler("tasks", messages.TopicTasks, n.tasksSub, n.handleTask)
	}
	if cfg.Bus != nil && cfg.Roles.Has(RoleTools) && cfg.Bus.Tools != nil {
		n.router.AddConsumerHandler("tool-requests", messages.TopicToolRequests, cfg.Bus.Tools, n.handleEffect)
	}
	if cfg.Bus != nil && cfg.Roles.Has(RoleModels) && cfg.Bus.Models != nil {
		n.router.AddConsumerHandler("model-requests", messages.TopicModelRequests, cfg.Bus.Models, n.handleEffect)
	}
	if n.remote != nil {
		n.router.AddConsumerHandler("replies", messages.TopicReplies, n.liveSub, n.handleReply)
	}
	n.hub = newHub()
	n.router.AddConsumerHandler("events-hub", messages.TopicEvents, n.liveSub, n.hub.handle)
	return n, nil
}

func (n *Node) fail(err error) error {
	_ = n.Close()
	return err
}

// errPermanent marks a bus message that can never be handled: it goes to TopicPoison.
var errPermanent = errors.New("permanent failure")

func (n *Node) handleTask(msg *message.Message) error {
	if msg.Metadata.Get(messages.MetaType) == messages.TypeCancelRequested {
		return n.handleCancel(msg)
	}
	env, err := n.taskEnvelope(msg)
	if err != nil {
		return fmt.Errorf("%w: task message %s: %w", errPermanent, msg.UUID, err)
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, n.cfg.SubmitTimeout).Result()
	if err != nil {
		return fmt.Errorf("task %s for session %s: %w", env.ID, env.SessionID, err) // retried
	}
	if err, ok := res.(error); ok {
		if errors.Is(err, actors.ErrNotOwner) {
			// The partition is moving: its next owner reads the task again.
			return fmt.Errorf("task %s: %w", env.ID, err)
		}
		return fmt.Errorf("%w: task %s for session %s: %w", errPermanent, env.ID, env.SessionID, err)
	}
	return nil
}

// taskEnvelope reads a tasks-topic message: the envelope ingress publishes, or the
// plain JSON task any Kafka client may publish (the body of POST /v1/tasks), which
// becomes a task.submitted envelope whose ID is the message's ID — so a redelivered
// message is recognised — and whose session is the task's session_id, else the
// message's key, else derived from the message ID.
func (n *Node) taskEnvelope(msg *message.Message) (messages.Envelope, error) {
	var probe struct {
		Type    *string          `json:"type"`
		Payload *json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(msg.Payload, &probe) == nil && probe.Type != nil && probe.Payload != nil {
		return messages.Unmarshal(msg.Payload)
	}
	t, err := DecodeTask(msg.Payload)
	if err != nil {
		return messages.Envelope{}, err
	}
	if t.SessionID == "" {
		t.SessionID = msg.Metadata.Get(messages.MetaSessionID)
	}
	if t.SessionID == "" {
		t.SessionID = "task-" + strings.NewReplacer("/", "-", ":", "-").Replace(msg.UUID)
	}
	if !sessionIDPattern.MatchString(t.SessionID) {
		return messages.Envelope{}, fmt.Errorf("%w: session %q: not a valid session ID", ErrBadTask, t.SessionID)
	}
	return n.envelope(t, msg.UUID)
}

// Run serves until ctx is done: it resumes sessions left running by an earlier
// process, then routes tasks. It returns after the router stopped.
func (n *Node) Run(ctx context.Context) error {
	n.ran.Store(true)
	expireCtx, stopExpiring := context.WithCancel(ctx)
	expired := make(chan struct{})
	go func() { defer close(expired); n.expireCaches(expireCtx) }()
	defer func() { stopExpiring(); <-expired }()
	errc := make(chan error, 1)
	go func() { errc <- n.router.Run(ctx) }()
	select {
	case <-n.router.Running():
	case err := <-errc:
		return err
	}
	// A sharded node resumes the sessions of the partitions it is assigned instead.
	if !n.sharded() && n.cfg.Roles.Has(RoleSessions) {
		if err := n.resume(ctx); err != nil {
			n.cfg.Logger.Error("resume sessions", "err", err)
		}
	}
	return <-errc
}

// cacheTTL is how long a node remembers the ID of a bus message it handled (the
// deduplicator) and the answer to an effect it performed (EffectResults);
// expireEvery is how often it forgets older ones when no traffic does it.
const (
	cacheTTL    = 10 * time.Minute
	expireEvery = time.Minute
)

// expireCaches forgets expired message IDs and effect answers every expireEvery,
// until ctx is done or the node closes: an idle node gives their memory back.
func (n *Node) expireCaches(ctx context.Context) {
	t := time.NewTicker(expireEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.stopping:
			return
		case now := <-t.C:
			n.dedupe.expire(now)
			n.effects.Expire(now)
		}
	}
}

// Start runs the node in the background until stop is called, returning once it
// routes tasks. stop cancels Run and waits for it.
func (n *Node) Start(ctx context.Context) (stop func(), err error) {
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- n.Run(runCtx) }()
	select {
	case <-n.Running():
		// Close before canceling Run: see Close.
		return func() { _ = n.Close(); cancel(); <-errc }, nil
	case err := <-errc:
		cancel()
		return nil, err
	}
}

// Running is closed once the node routes tasks.
func (n *Node) Running() <-chan struct{} { return n.router.Running() }

// resume wakes every session whose latest task is unfinished.
func (n *Node) resume(ctx context.Context) error {
	infos, err := n.log.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning})
	if err != nil {
		return err
	}
	for _, s := range infos {
		n.system.Root.Send(n.host, &actors.ResumeSession{SessionID: s.ID})
	}
	if len(infos) > 0 {
		n.cfg.Logger.Info("resuming unfinished sessions", "count", len(infos))
	}
	return nil
}

// Task is what ingress accepts: the body of POST /v1/tasks and of a troupe.tasks message.
type Task struct {
	Input     string `json:"input"`
	SessionID string `json:"session_id,omitempty"`
	Agent     string `json:"agent,omitempty"`
	MaxSteps  int    `json:"max_steps,omitempty"`
	// DeadlineMS is a relative deadline in milliseconds from submission.
	DeadlineMS int64  `json:"deadline_ms,omitempty"`
	ReplyTopic string `json:"reply_topic,omitempty"`
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// ErrBadTask is wrapped by every validation error of a submitted task.
var ErrBadTask = errors.New("bad task")

// Validate reports what is wrong with a task, if anything.
func (t Task) Validate() error {
	switch {
	case t.Input == "":
		return fmt.Errorf("%w: input is required", ErrBadTask)
	case len(t.Input) > 1<<20:
		return fmt.Errorf("%w: input is %d bytes, the limit is 1 MiB", ErrBadTask, len(t.Input))
	case t.SessionID != "" && !sessionIDPattern.MatchString(t.SessionID):
		return fmt.Errorf("%w: session_id must be 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit", ErrBadTask)
	case t.MaxSteps < 0 || t.MaxSteps > 1000:
		return fmt.Errorf("%w: max_steps must be between 0 and 1000", ErrBadTask)
	case t.DeadlineMS < 0:
		return fmt.Errorf("%w: deadline_ms must not be negative", ErrBadTask)
	case t.Agent != "" && t.Agent != "default":
		return fmt.Errorf("%w: unknown agent %q (this node runs \"default\")", ErrBadTask, t.Agent)
	}
	return nil
}

// Submit validates a task, publishes it on messages.TopicTasks and returns once the
// session recorded it. It returns the session ID (a new one when the task names none).
func (n *Node) Submit(ctx context.Context, t Task) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	if t.SessionID == "" {
		t.SessionID = n.cfg.IDs.NewID()
	}
	env, err := n.envelope(t, n.cfg.IDs.NewID())
	if err != nil {
		return "", err
	}
	b, err := messages.Marshal(env)
	if err != nil {
		return "", err
	}
	msg := message.NewMessage(env.ID, b)
	msg.Metadata.Set(messages.MetaSessionID, env.SessionID)
	msg.Metadata.Set(messages.MetaType, string(env.Type))
	msg.SetContext(ctx)
	if err := n.pub.Publish(messages.TopicTasks, msg); err != nil {
		return "", fmt.Errorf("node: publish task: %w", err)
	}
	return t.SessionID, nil
}

// envelope turns a validated task into a task.submitted envelope with the given ID.
// Secrets in the input are redacted here: they never reach the bus, let alone the log.
func (n *Node) envelope(t Task, id string) (messages.Envelope, error) {
	input := string(n.redactor.Redact([]byte(t.Input)))
	p := &messages.TaskSubmitted{Input: input, Agent: t.Agent, MaxSteps: t.MaxSteps, ReplyTopic: t.ReplyTopic}
	now := n.cfg.Clock.Now()
	if t.DeadlineMS > 0 {
		p.DeadlineUS = now.Add(time.Duration(t.DeadlineMS) * time.Millisecond).UnixMicro()
	}
	env, err := messages.NewEnvelope(p)
	if err != nil {
		return env, err
	}
	env.ID, env.SessionID, env.TS, env.Actor = id, t.SessionID, now.UnixMicro(), "ingress"
	return env, nil
}

// Cancel stops a session's running task. On a sharded node the cancellation goes to
// the session's owner over the bus, and Cancel returns once it is published.
func (n *Node) Cancel(ctx context.Context, sessionID, reason string) error {
	if n.sharded() {
		return n.publishCancel(ctx, sessionID, reason)
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.CancelTask{SessionID: sessionID, Reason: reason}, n.cfg.SubmitTimeout).Result()
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

// liveSessions asks the session host how many session actors are alive.
func (n *Node) liveSessions() float64 {
	if n.hostStopped.Load() {
		return 0
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.CountSessions{}, time.Second).Result()
	if c, ok := res.(int); ok && err == nil {
		return float64(c)
	}
	return math.NaN()
}

// Metrics returns the node's metrics.
func (n *Node) Metrics() *Metrics { return n.metrics }

// Log returns the node's event log.
func (n *Node) Log() eventlog.Log { return n.log }

// Bus returns the node's publisher and subscriber (the embedded GoChannel).
// It is nil when the node runs on a bus given in Config.Bus.
func (n *Node) Bus() *gochannel.GoChannel { return n.bus }

// Publisher returns the publisher of the node's bus.
func (n *Node) Publisher() message.Publisher { return n.pub }

// Watch subscribes to a session's live events. The channel closes when cancel is
// called or when the subscriber fell behind (read the log from the last seq seen).
func (n *Node) Watch(sessionID string) (<-chan messages.Envelope, func()) {
	return n.hub.subscribe(sessionID)
}

// CloseStreams ends every live SSE stream; an HTTP server calls it when it shuts down.
func (n *Node) CloseStreams() {
	n.streamsOnce.Do(func() { close(n.streamsDone) })
}

// Close stops the node: ingress first (call it before canceling Run's context: the
// router then finishes subscribing a handler it is starting and stops it, where a
// canceled context would leave that handler waited for until the close timeout), then the session actors (each finishes the
// message it is handling, so nothing is half-written; unfinished tasks stay resumable
// from the log), then the effect actors, the bus and the log. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		close(n.stopping)
		n.CloseStreams()
		// A router that never ran has nothing to drain (and its Close would wait out
		// its timeout for handlers that never started).
		if n.router != nil && n.ran.Load() {
			errs = append(errs, n.router.Close())
		}
		if n.system != nil {
			if n.host != nil {
				_ = n.system.Root.PoisonFuture(n.host).Wait()
				n.hostStopped.Store(true)
			}
			for _, pid := range n.effect {
				n.system.Root.Stop(pid)
			}
			n.system.Shutdown()
		}
		if n.outbox != nil {
			// The sessions are stopped: publish what they handed over, then close the bus.
			errs = append(errs, n.outbox.Close())
		}
		if n.hub != nil {
			n.hub.close()
		}
		if n.bus != nil {
			errs = append(errs, n.bus.Close())
		}
		if n.ownLog {
			errs = append(errs, n.log.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// DataDir returns the absolute data directory of an embedded node.
func (n *Node) DataDir() string {
	abs, err := filepath.Abs(n.cfg.DataDir)
	if err != nil {
		return n.cfg.DataDir
	}
	return abs
}
