package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/deadline"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/telemetry"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/notes"
	"github.com/troupe-run/troupe/tools/skills"
)

// TopicPoison receives bus messages that could not be handled, with the reason in
// their metadata (key "reason_poisoned").
const TopicPoison = "troupe.poison"

// DefaultSystemPrompt is the default agent's system prompt.
const DefaultSystemPrompt = "You are a helpful agent running on Troupe. Use the tools when they help; answer concisely."

// DefaultMaxLiveSessions is the default of Config.MaxLiveSessions. The peak of live
// session actors is otherwise the task rate times the idle timeout (a session actor
// takes about 8 KB), and it sets the size of maps that never shrink.
const DefaultMaxLiveSessions = 10_000

// DefaultMaxQueuedTasks is the default of Config.MaxQueuedTasks.
const DefaultMaxQueuedTasks = 1000

// DefaultToolTimeout and DefaultModelTimeout are the defaults of Config.ToolTimeout
// and Config.ModelTimeout; the default of Config.EffectReissue is the longer of the
// two timeouts plus DefaultReissueMargin.
const (
	DefaultToolTimeout   = 30 * time.Second
	DefaultModelTimeout  = 2 * time.Minute
	DefaultReissueMargin = 30 * time.Second
)

// DefaultStopTimeout is the default of Config.StopTimeout: a session actor's
// longest message is about one append attempt (actors.Deps.IOTimeout, 30 s).
const DefaultStopTimeout = 30 * time.Second

// DefaultResumeConcurrency is the default of Config.ResumeConcurrency: half the
// default connections of the ClickHouse log (clickhouse.DefaultMaxOpenConns).
const DefaultResumeConcurrency = 4

// Config configures a node. The zero value runs an embedded node in ./.troupe on the
// offline model with the calculator and clock tools.
type Config struct {
	// DataDir holds the embedded event log (default ./.troupe).
	DataDir string
	// LockWait is how long New waits for a lock of DataDir (the event log's, the
	// memory's and the knowledge's vectors') that a node in another live process
	// holds, such as the one before it, still stopping when a supervisor restarts
	// it; the wait is logged once. 0 fails at once with the error naming the holder
	// (a one-off command beside a running node). DataLockWait suits a server.
	LockWait time.Duration
	// Log overrides the event log; when nil, a SQLite log is opened in DataDir.
	// A node without Bus on a log that several processes may write without
	// refusing their racing writes (eventlog.SeqRaces: ClickHouse) owns it whole
	// unless ShareLog is set: New takes its next ownership epoch, last (a New that
	// fails takes nothing), and the node appends every stream under it, so that a
	// node started on the log later takes it over, and this one then refuses
	// writes and new tasks (eventlog.ErrFenced) instead of writing beside it
	// (logowner.go).
	Log eventlog.Log
	// ShareLog makes a node without Bus write its Log beside the node that owns
	// it, without taking it: for the short commands that change a few streams of
	// a log a serving node owns (node run, node memory, node rag, node tools call,
	// replay fork). Their writes are not fenced: one that races the owner's
	// write of the same stream may be lost. Ignored on a shared bus, and on a log
	// that refuses racing writes (SQLite).
	ShareLog bool
	// Model answers every model call (default llm.Offline). A model that cannot call
	// tools natively is given them through the ReAct text protocol.
	Model llm.Model
	// Fallbacks are tried in order when Model fails (after its retries).
	Fallbacks []llm.Model
	// Gateway configures retries, quotas, prices and caches of model calls; its Chain
	// is made of Model and Fallbacks.
	Gateway gateway.Config
	// Tools are offered to the agent (default calculator and clock), sorted by name
	// whatever their order here (tools.Registry).
	Tools []tools.Tool
	// ToolCatalog, when set, offers the agent more tools whose set changes while the
	// node runs (the MCP servers' tools, mcp.Client): read at each model request and
	// each call, beside Tools (actors.ToolCatalog).
	ToolCatalog actors.ToolCatalog
	// SystemPrompt opens every conversation (default DefaultSystemPrompt).
	SystemPrompt string
	// Skills are offered to the agent (package skills): their names and descriptions
	// in the system prompt, their tools beside Tools. Nil: none.
	Skills *skills.Set
	// Disclosure is how the agent's tools reach the model (package disclosure): all
	// their schemas in every request (disclosure.All, the default), a catalog of
	// groups loaded on demand, or a search. Catalog and search cover ToolCatalog's
	// tools too, as they are at each request: an MCP server's tools are one group
	// ("mcp:<server>").
	Disclosure disclosure.Strategy
	// ToolEmbedder, when set, ranks the matches of search_tools (disclosure.Search)
	// by embedding similarity instead of BM25 (disclosure.WithEmbedder).
	ToolEmbedder llm.Embedder
	// Notes, when set, gives the agent the notes tool (package tools/notes): its notes
	// are events of the stream notes/<agent> in the node's event log (Log, DataDir)
	// unless Notes.Log names another; their text is redacted as events are (Secrets).
	Notes *notes.Config
	// Memory, when set, gives the node agent memory (package memory) on its event
	// log (Memory.Log is set to it), served at /v1/memories; with Memory.Vectors nil
	// the vectors are kept by the embedded HNSW index at MemoryVectorsPath. The node closes
	// it.
	Memory *memory.Config
	// MemoryTool, with Memory, gives the agent the memory tool (memory.ToolConfig):
	// add, search, summary, stats, update, remove, forget, consolidate, clear_all,
	// the core block edits and recall, in its namespaces. On a sharded cluster a
	// call runs on the owner of the namespace it names (every node should give the
	// same MemoryTool). The core blocks of its
	// namespace are in the system prompt of each task: the ingress records them with
	// the task (messages.TaskSubmitted.Memory) as they stand when it is submitted,
	// so a block the agent edits during a task shows from its next task on.
	MemoryTool *memory.ToolConfig
	// MemoryWriteAfterTask, with MemoryTool, remembers each task of the agent that
	// completes: memory.Namespace.Remember on the tool's namespace with the turn
	// (the task's input as the user's message, its output as the assistant's),
	// under the key "<session>/<seq of its task.completed>" (a task remembered
	// twice writes once), each memory with the source {kind "session", the session,
	// that seq}. A worker of the node does it (on a sharded cluster, the owner of
	// the namespace's partition, as every write of it), one task at a time, after the
	// task.completed is durable: the session never waits for it, and a failure is
	// logged, never the task's. Close waits up to 5 s for the tasks queued. Best
	// effort: a task that ends while 1,024 others wait, or that is still queued
	// when Close gives up, is not remembered (a warning says so).
	MemoryWriteAfterTask bool
	// MemoryWritten, when set, hears of every write of new memories to a namespace on
	// the node (over HTTP, by the memory tool, by Remember): the namespace and how
	// many memories it took; duplicates count none.
	MemoryWritten func(namespace string, count int)
	// Consolidation, with Memory, runs the consolidator (package consolidator) in the
	// background: one actor per namespace this node owns, woken on its schedule and
	// after Threshold writes through the node. Its Open and System are the node's;
	// its model, when it names none, is Model (none when Model is the offline
	// rule-based one, which cannot summarise). Without it, consolidation runs only
	// when asked (the memory tool's consolidate, node memory consolidate).
	Consolidation *consolidator.SchedulerConfig
	// Knowledge, when set, gives the node knowledge bases (package knowledge) on its
	// event log (Knowledge.Log is set to it), served at /v1/kb (knowledgeRoutes);
	// with Knowledge.Vectors nil the vectors are kept by the embedded HNSW index at
	// KnowledgeVectorsPath, and with Knowledge.Model nil Model answers, rewrites
	// queries and writes HyDE passages (none when it is the offline model).
	Knowledge *knowledge.Config
	// KnowledgeTool, with Knowledge, gives the agent the rag tool (add, search,
	// ask; knowledgetool.go) over the node's knowledge bases.
	KnowledgeTool *KnowledgeToolConfig
	// Chains are tool chains the agent gets as tools (tools.Chain). Their steps call
	// the agent's other tools: Tools, the skills', the notes' (Notes) and, through
	// ToolCatalog when it owns the name (tools.ChainCatalog, as mcp.Client does for
	// "<server>__<tool>"), an MCP server's tool, looked up when the step runs.
	// A session runs a chain step by step (actors/chain.go).
	Chains []tools.Chain
	// MaxSteps bounds the model calls of a task (default 10).
	MaxSteps int
	// MaxTokens, LoopRepeats and LoopStaleSteps are the default agent's other stop
	// conditions (actors.Agent's: 0 is no token budget, and the default loop
	// detection; actors.LoopOff turns a loop check off). A named agent without its
	// own takes them.
	MaxTokens, LoopRepeats, LoopStaleSteps int
	// MaxCostUSD is the default agent's cost budget in US dollars (0: none; a named
	// agent without its own takes it).
	MaxCostUSD float64
	// MaxSubAgents bounds the sub-agents (child sessions) one task of the default
	// agent starts itself (0: DefaultMaxSubAgents); a named agent without its own
	// takes it.
	MaxSubAgents int
	// Context bounds what the default agent's model calls are sent: the model's
	// window, the tokens reserved for its answer, the history considered
	// (actors.ContextOptions; zero fields: the defaults). A named agent takes the
	// fields it does not set from it.
	Context actors.ContextOptions
	// Agents are the agents a task may name (Task.Agent) besides "default", the
	// agent the fields above configure (an agents file's; NamedAgent).
	Agents []NamedAgent
	// A2A, when set, serves the node's agents over the A2A protocol in Handler
	// (node/a2a.go).
	A2A *A2AConfig
	// DecisionRules is the version of the decision rules the node records new
	// tasks under (actors.Agents.Rules): 0, this build's (actors.ContextRules). A
	// cluster upgraded node by node to a build with newer rules runs the new nodes
	// with the old build's version until every node runs the new one, so that a
	// session a new node started can move to an old one (which fails a task
	// recorded under rules it does not have).
	DecisionRules int
	// ApprovalTimeout is how long a call of a tool that needs approval
	// (NamedAgent.Approvals) waits for an answer before the session rejects it, for
	// the agents that set none (NamedAgent.ApprovalTimeout); 0 waits for ever.
	ApprovalTimeout time.Duration
	// MaxParallelTools bounds one session's tool calls in flight (default 4; a
	// plan_execute agent's concurrency raises it).
	MaxParallelTools int
	// ToolTimeout bounds one tool call (default 30 s), of the tools that set no
	// timeout of their own (tools.WithTimeout: http_fetch's, a delegate's). On a
	// node serving tool requests (Bus.Tools), the longest of it and its tools' own
	// timeouts, plus HandoffGrace, is how long a rebalance of the tools group waits
	// for the requests it has in hand (holdServedCalls).
	ToolTimeout time.Duration
	// ModelTimeout bounds one model call (default 2 minutes); plus HandoffGrace,
	// how long a rebalance of the models group waits for the requests a node
	// serving them has in hand.
	ModelTimeout time.Duration
	// EffectReissue is how long a node without the tools or models role waits for
	// the reply to a call it asked another node for before it publishes the request
	// again (a reply can be lost); each further wait doubles, up to 8 times it.
	// Default: the longer of ModelTimeout and ToolTimeout, plus 30 s. A call of a
	// tool of the node's agents with a longer timeout of its own (tools.WithTimeout:
	// http_fetch's, a delegate's) first waits that timeout plus 30 s, set or not: a
	// request published again while its call runs only joins it. The node knows only
	// its own tools' timeouts: a tool that only the tool nodes have, or that they
	// configure with another timeout, waits EffectReissue.
	EffectReissue time.Duration
	// StreamUnwatched has every model call of the sessions the node runs stream,
	// watched or not, so that a watcher that comes during one gets its text so far
	// (WatchDeltas). By default a call streams only when its session has a watcher
	// of deltas as it starts: streaming costs each call about ten times the CPU and
	// twenty times the memory of an answer read whole (openai-go's decoding of the
	// stream, BenchmarkProviderCall), for a watcher that may never come.
	StreamUnwatched bool
	// IdleTimeout passivates idle session actors (default 1 minute).
	IdleTimeout time.Duration
	// MaxLiveSessions bounds the session actors alive at once (default
	// DefaultMaxLiveSessions): past it, the least recently used idle sessions are
	// passivated before their idle timeout (their next message folds them back).
	// Sessions with a running task are never passivated, so with all of them busy the
	// node runs more (troupe_sessions_over_limit_total counts those starts).
	MaxLiveSessions int
	// MaxQueuedTasks bounds the tasks waiting their turn behind a session's
	// running one (default DefaultMaxQueuedTasks; negative: no bound). Each is
	// held in its session's state; a new task past it is refused without being
	// recorded: 429 with Retry-After over HTTP, an error over MCP, A2A and Go, a
	// rejected result (messages.ReasonRejected) for a task of troupe.tasks.
	MaxQueuedTasks int
	// Secrets (API keys, tokens) are replaced by "[REDACTED]" wherever they would
	// enter an event; strings shaped like keys and bearer tokens always are (package
	// redact). cmd/node passes every key variable of the environment.
	Secrets []string
	// Redactor keeps the secrets out of the events: it learns Secrets, and those the
	// node obtains at run time (the API tokens of a tokens file read again by
	// ReloadTokens). A program that redacts its log lines with it
	// (redact.NewHandler), as cmd/node does, keeps them out of those too, and can
	// have it learn its own run-time secrets (an MCP server's OAuth tokens).
	// Nil: a Redactor of its own.
	Redactor *redact.Redactor
	// SecretKey (a2a.SecretKeySize bytes, AES-256) seals the secrets the node keeps
	// in its event log: the token and credentials of A2A push configs (secretkey.go).
	// Every node over one log must have the same key. Nil: the key of the file
	// SecretKeyFile in DataDir, made (random, mode 0600) the first time it is needed;
	// nodes that share the data directory share it, the others need this set.
	SecretKey []byte
	// Traces, when set, is where the node's spans go (telemetry.With a provider of
	// the caller's, which the caller shuts down). Nil: the OTEL_* environment says
	// (telemetry.FromEnv): off unless it names an exporter; the node then flushes
	// and stops the exporter on Close.
	Traces *telemetry.Traces
	// Bus replaces the embedded in-process bus, e.g. with Kafka (package kafka). Nil
	// means the embedded GoChannel.
	Bus *Bus
	// SubmitTimeout bounds how long ingress waits for a task to be recorded (default 30 s;
	// on the embedded node a wait may end up to a sixteenth of it earlier, as waits
	// that start close together share one deadline).
	SubmitTimeout time.Duration
	// ResumeConcurrency bounds the sessions the node resumes at once, when Run starts
	// and when it is assigned partitions (default DefaultResumeConcurrency): each
	// reads its events from the log, and a takeover that woke hundreds at once held
	// every connection of the ClickHouse log's pool until their reads were done, so
	// that the API's reads (MCP, A2A, the dashboard) timed out waiting for one. Keep
	// it below the log's connections (cmd/node: half of clickhouse_max_conns).
	ResumeConcurrency int
	// HandoffGrace bounds how long a sharded node that loses its partitions, and any
	// node that closes (Close), waits for the effects in flight to answer (their
	// results are recorded, and not performed again where the sessions run next)
	// before it stops their sessions, and then, a sharded node, for its outbox to
	// publish what they handed it (default 5 s). The whole handover
	// (Revoked) is bounded at 20 s whatever it is, since Kafka evicts a member that
	// has not rejoined once the group's rebalance timeout (30 s for a node's groups)
	// passed since the rebalance began, heartbeats or not: what is still waited for
	// then is abandoned. The two waits and recording the release (up to 5 s) fit in
	// that bound while it stays below 7 s. Close's wait is within its StopTimeout.
	HandoffGrace time.Duration
	// StopTimeout bounds how long Close waits for the node's actors to stop (default
	// DefaultStopTimeout): each session actor gets up to HandoffGrace for its
	// effects in flight to answer, then finishes the message it is handling,
	// which may be an append (IOTimeout, 30 s, bounds each attempt) or the fold of a
	// long history, and each memory namespace's actor its request. Past it, Close
	// logs what is still stopping and goes on: it closes the bus and the log (the
	// caller closes a log it gave in Log) under them.
	StopTimeout time.Duration
	// PublishMarkInterval is how often a sharded node whose log records releases
	// (eventlog.Releasing) marks in it, for the partitions it owns, the time before
	// which it has published on the bus every event their sessions appended
	// (publication marks, pubmark.go), when they appended anything since the last
	// mark (default 5 s; negative: never). A node killed without releasing its
	// partitions leaves that mark: their next owners publish again only what
	// ended after it, not the last ten minutes. One write per interval per node.
	PublishMarkInterval time.Duration
	// HTTP bounds the HTTP server of the node's API (HTTPServer): timeouts and the
	// number of connections served at once.
	HTTP HTTPConfig
	// Resume picks which of the unfinished sessions in the log an embedded node
	// resumes when Run starts: nil resumes every one (node serve), ResumeNone none
	// (node run, which runs only its own task and leaves the others to a node that
	// serves the directory). A session left out stays unfinished, for the next node
	// that resumes it. A sharded node resumes the sessions of its partitions instead.
	Resume func(sessionID string) bool
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
	if err := c.A2A.validate(); err != nil {
		return err
	}
	if err := actors.CheckRecordRules(c.DecisionRules); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.Bus == nil && c.Roles != 0 && c.Roles != RoleAll {
		return errors.New("node: roles need a shared bus (Kafka); an embedded node does everything")
	}
	if c.Bus != nil && c.Bus.Sharded && c.Bus.Partition == nil {
		return errors.New("node: a sharded bus needs its Partition function")
	}
	if c.Bus != nil && c.Bus.Sharded && c.Roles.Has(RoleSessions) {
		if _, ok := c.Bus.Tasks.(PartitionReader); !ok {
			return fmt.Errorf("node: a sharded bus's Tasks subscriber (%T) must tell the partition of each message (node.PartitionReader; kafka.Subscriber does)", c.Bus.Tasks)
		}
	}
	if c.SecretKey != nil && len(c.SecretKey) != a2a.SecretKeySize {
		return fmt.Errorf("node: the secret key has %d bytes, want %d", len(c.SecretKey), a2a.SecretKeySize)
	}
	if c.MaxSteps < 0 || c.MaxParallelTools < 0 || c.ToolTimeout < 0 || c.ModelTimeout < 0 || c.EffectReissue < 0 || c.IdleTimeout < 0 || c.MaxLiveSessions < 0 || c.ApprovalTimeout < 0 || c.StopTimeout < 0 {
		return errors.New("node: limits and timeouts must not be negative")
	}
	if err := checkStops("the default agent", c.MaxTokens, c.LoopRepeats, c.LoopStaleSteps); err != nil {
		return err
	}
	if err := checkCost("the default agent", c.MaxCostUSD); err != nil {
		return err
	}
	if err := checkSubAgents("the default agent", c.MaxSubAgents); err != nil {
		return err
	}
	if err := c.Context.Validate(); err != nil {
		return fmt.Errorf("node: the default agent: %w", err)
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	if _, err := tools.NewRegistry(c.Tools...); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if _, err := disclosure.ParseStrategy(string(c.Disclosure)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.MemoryWriteAfterTask && (c.Memory == nil || c.MemoryTool == nil) {
		return errors.New("node: MemoryWriteAfterTask needs Memory and MemoryTool (its namespace)")
	}
	if c.Consolidation != nil && c.Memory == nil {
		return errors.New("node: Consolidation needs Memory")
	}
	if c.Notes != nil {
		if err := c.Notes.Validate(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if len(c.Chains) > 0 {
		if err := c.validateChains(); err != nil {
			return err
		}
	}
	declared := make(map[string]bool, len(c.Agents))
	for _, a := range c.Agents {
		if err := a.validate(); err != nil {
			return err
		}
		if a.Knowledge != "" && c.KnowledgeTool == nil {
			return fmt.Errorf("node: agent %q: a knowledge base of its own needs KnowledgeTool (the node's rag tool)", a.Name)
		}
		if a.MemoryNamespace != "" && c.MemoryTool == nil {
			return fmt.Errorf("node: agent %q: a memory namespace of its own needs MemoryTool (the node's memory tool)", a.Name)
		}
		if declared[a.Name] {
			return fmt.Errorf("node: agent %q is declared twice", a.Name)
		}
		declared[a.Name] = true
	}
	if _, err := c.withDelegate(c.Tools, nil); err != nil {
		return err
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = ".troupe"
	}
	if c.Model == nil {
		c.Model = llm.NewOffline()
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
	if c.ResumeConcurrency <= 0 {
		c.ResumeConcurrency = DefaultResumeConcurrency
	}
	if c.HandoffGrace <= 0 {
		c.HandoffGrace = 5 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.PublishMarkInterval == 0 {
		c.PublishMarkInterval = 5 * time.Second
	}
	if c.MaxLiveSessions == 0 {
		c.MaxLiveSessions = DefaultMaxLiveSessions
	}
	if c.MaxQueuedTasks == 0 {
		c.MaxQueuedTasks = DefaultMaxQueuedTasks
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = DefaultToolTimeout
	}
	if c.ModelTimeout <= 0 {
		c.ModelTimeout = DefaultModelTimeout
	}
	if c.EffectReissue <= 0 {
		// A reissued request joins the call still running on its performer, so
		// one sooner than the call's timeout costs only a message; one later
		// leaves a lost reply's session waiting longer.
		c.EffectReissue = max(c.ModelTimeout, c.ToolTimeout) + DefaultReissueMargin
	}
	// The memory tool may work in the reflexion agents' lessons namespaces.
	c.MemoryTool = c.withLessonNamespaces()
	c.HTTP.setDefaults()
}

// Bus is a node's connection to a shared bus. The node closes none of it.
type Bus struct {
	Publisher message.Publisher
	// Tasks consumes messages.TopicTasks. In a cluster it is a consumer group shared by
	// the nodes, so that each session's partition, and so the session, has one owner;
	// a sharded node's Tasks is also a PartitionReader.
	Tasks message.Subscriber
	// Live consumes messages.TopicEvents for this node's live streams (SSE, node run)
	// of sessions that other nodes run, while there are such streams (the node's own
	// sessions feed its streams directly): every partition, from the latest offset,
	// in no consumer group; Subscribe returns once the offsets are fixed. It also consumes
	// messages.TopicReplies, the answers to this node's effect requests, on a node
	// that serves effects, messages.TopicEffectCancels, and messages.TopicDeltas while
	// the node has watchers of deltas that other nodes may send (WatchDeltas).
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
	// Partition maps a session ID to its partition of messages.TopicTasks (kafka.Partition,
	// murmur2). Required when Sharded. Producers that place keys otherwise (librdkafka
	// clients such as kcat hash by CRC32) or write no key still reach the session: a
	// message read from a partition other than its session's is forwarded there.
	Partition func(sessionID string, partitions int) int
	// StoredRetention is how long a message too large for the bus stays stored in
	// the log for the reference the bus carries (messages.BusStored): older ones are
	// pruned (eventlog.Pruner) about every eighth of it, at most every 6 hours. It
	// must exceed the retention of every topic that carries references (tasks,
	// requests, replies), so that no reference outlives its message: the default,
	// DefaultStoredRetention, is Kafka's default retention (7 days) and a day. A
	// negative value keeps them for good.
	StoredRetention time.Duration
	// TopicPrefix is the prefix the bus puts before every topic name on the wire
	// (kafka.TopicLayout.Prefix, --topic-prefix). A task's reply_topic goes behind
	// it too, so one that Kafka's 249 characters hold only without it is refused
	// when the task is submitted: the publisher could never name it.
	TopicPrefix string
}

// DefaultStoredRetention is Bus.StoredRetention's default.
const DefaultStoredRetention = 8 * 24 * time.Hour

// PartitionReader tells which partition of its topic a subscriber read a delivered
// message from (kafka.Subscriber.MessagePartition). A sharded node's Bus.Tasks must be
// one: the node forwards a message read from a partition other than its session's.
type PartitionReader interface {
	MessagePartition(msg *message.Message) (partition int, ok bool)
}

// PartitionPublisher publishes messages to one partition of a topic, whatever their
// keys (kafka.Publisher.PublishToPartition). A sharded node whose Bus.Publisher is
// one forwards a message to the partition of its session that it computed with the
// partition count of its assignment: when partitions were added to troupe.tasks,
// a publisher that knows the new count already would place the copy by that count,
// on the partition it was read from, where the node would read it and forward it
// again until its group's next assignment.
type PartitionPublisher interface {
	PublishToPartition(topic string, partition int, msgs ...*message.Message) error
}

// RecordTimer tells when a delivered message was written to its topic
// (kafka.Subscriber.MessageTime). A task read from a Bus.Tasks that is one
// counts its deadline_ms from then, when that is earlier than the node's clock: a
// task that waited on the topic while no node read it (they were down, or behind)
// has had that time of its deadline.
type RecordTimer interface {
	MessageTime(msg *message.Message) (written time.Time, ok bool)
}

// RecordCoordinates is the optional capability of Bus.Tasks to tell where a message
// it delivered sits in its topic (Kafka: messages.CoordinatesID): the key of its
// copy on TopicPoison (RecordPoisonedKey).
type RecordCoordinates interface {
	MessageCoordinates(msg *message.Message) (coordinates string, ok bool)
}

// recordCoordinates is the position of msg, a message of the tasks topic, when
// its subscriber tells it (RecordCoordinates).
func (n *Node) recordCoordinates(msg *message.Message) (string, bool) {
	if rc, ok := n.tasksSub.(RecordCoordinates); ok {
		return rc.MessageCoordinates(msg)
	}
	return "", false
}

// noSubscribers is what GoChannel logs, at INFO, for each message published to a topic
// nobody subscribes to.
const noSubscribers = "No subscribers to send message"

// quietNoSubscribers demotes GoChannel's noSubscribers record to DEBUG. EmbeddedBus
// publishes nothing to a topic without subscribers, so the record is left for a
// message published while a topic's last subscriber leaves.
type quietNoSubscribers struct{ watermill.LoggerAdapter }

func (l quietNoSubscribers) Info(msg string, fields watermill.LogFields) {
	if msg == noSubscribers {
		l.LoggerAdapter.Debug(msg, fields)
		return
	}
	l.LoggerAdapter.Info(msg, fields)
}

func (l quietNoSubscribers) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietNoSubscribers{l.LoggerAdapter.With(fields)}
}

// Agent returns the agent this configuration runs: the code whose decisions replay
// verification checks against recorded sessions. With Notes set, the notes' tools
// are among its tools, as on a node (Agent reads no log; a notes tool already in
// Tools is kept). It fails on tools the
// registry refuses (tools.NewRegistry) and on chains that cannot be built, as
// Validate does.
func (c Config) Agent() (actors.Agent, error) {
	c.setDefaults()
	ts, err := c.withNotesSpecs()
	if err != nil {
		return actors.Agent{}, err
	}
	c.Tools = ts
	agent, _, err := c.agent()
	return agent, err
}

// AllAgents returns the agents this configuration runs: the default one (Agent) and
// the named ones (Agents), the code replay verification checks sessions whose tasks
// name agents against.
func (c Config) AllAgents() (actors.Agents, error) {
	c.setDefaults()
	ts, err := c.withNotesSpecs()
	if err != nil {
		return actors.Agents{}, err
	}
	c.Tools = ts
	agent, reg, err := c.agent()
	if err != nil {
		return actors.Agents{}, err
	}
	named, err := c.namedAgents(agent, reg)
	return actors.Agents{Default: agent, Named: named}, err
}

// CheckPromptFits reports a default agent whose stable prefix leaves no room for a
// task in its context window (actors.Agent.CheckPromptFits, whose
// *actors.PromptFitError it wraps), as New refuses it: it builds the agent as New
// does, from the configuration's tools, the skills', the notes', the memory, rag
// and delegate tools', the chains' and the disclosure strategy's. It judges a
// configuration before its MCP servers are connected (a configuration file's,
// internal/nodeconfig): with no ToolCatalog, their tools, which New offers too,
// are not counted, and a chain's step that names a tool the agent has not got is
// taken for one of theirs (Validate reports it, once they are known). It fails,
// as Agent does, on what keeps the agent from being built.
func (c Config) CheckPromptFits() error {
	c.setDefaults()
	ts, err := c.withNotesSpecs()
	if err != nil {
		return err
	}
	c.Tools = ts
	var opts []tools.ChainOption
	if c.ToolCatalog == nil {
		opts = append(opts, tools.WithStepCatalog(pendingCatalog{}))
	}
	agent, _, err := c.defaultAgent(opts...)
	if err != nil {
		return err
	}
	if err := agent.CheckPromptFits(); err != nil {
		return fmt.Errorf("node: the default agent: %w", err)
	}
	return nil
}

// pendingCatalog stands for the MCP servers' catalog before it is connected
// (CheckPromptFits): it may offer a tool of any name, and offers none yet.
type pendingCatalog struct{}

func (pendingCatalog) Owns(string) bool               { return true }
func (pendingCatalog) Tool(string) (tools.Tool, bool) { return nil, false }

// agent is the agent of this configuration and the registry of its tools
// (defaultAgent), refused when its prompt leaves no room for a task
// (actors.Agent.CheckPromptFits). The caller has set the defaults.
func (c Config) agent() (actors.Agent, *tools.Registry, error) {
	agent, reg, err := c.defaultAgent()
	if err != nil {
		return actors.Agent{}, nil, err
	}
	if err := agent.CheckPromptFits(); err != nil {
		return actors.Agent{}, nil, fmt.Errorf("node: the default agent: %w", err)
	}
	return agent, reg, nil
}

// defaultAgent is the agent of this configuration and the registry of its tools:
// Tools, the skills' tools and the disclosure strategy's, sorted by name with
// compacted schemas, so the tool section of every prompt is byte-identical whatever
// order the tools were configured in. The system prompt gains the skills' section
// (the strategy's is added at each request, as it follows the tool catalog:
// actors.ToolDisclosure). chainOpts add to the chains' options (chainTools). The
// caller has set the defaults.
func (c Config) defaultAgent(chainOpts ...tools.ChainOption) (actors.Agent, *tools.Registry, error) {
	strategy, err := disclosure.ParseStrategy(string(c.Disclosure))
	if err != nil {
		return actors.Agent{}, nil, fmt.Errorf("node: %w", err)
	}
	skillTools, err := c.skillTools()
	if err != nil {
		return actors.Agent{}, nil, err
	}
	ts := append(slices.Clone(c.Tools), skillTools...)
	chains, err := c.chainTools(ts, chainOpts...)
	if err != nil {
		return actors.Agent{}, nil, err
	}
	scope, err := c.agentScopes()
	if err != nil {
		return actors.Agent{}, nil, err
	}
	d, err := disclosure.New(strategy, append(ts, chains...), disclosure.WithCatalog(c.ToolCatalog), disclosure.WithEmbedder(c.ToolEmbedder),
		disclosure.WithScope(scope))
	if err != nil {
		return actors.Agent{}, nil, fmt.Errorf("node: %w", err)
	}
	reg, err := tools.NewRegistry(d.Tools()...)
	if err != nil {
		return actors.Agent{}, nil, fmt.Errorf("node: %w", err)
	}
	// The strategy's section (the groups to load, how to search) follows the
	// catalog: the agent adds it at each request (actors.ToolDisclosure).
	prompt := c.SystemPrompt
	if section := c.Skills.PromptSection(); section != "" {
		prompt += "\n\n" + strings.TrimSuffix(section, "\n")
	}
	agent := actors.Agent{Name: "default", SystemPrompt: prompt, Model: c.Model.Name(), Tools: reg.Specs(), MaxSteps: c.MaxSteps,
		Catalog: c.ToolCatalog, MaxTokens: c.MaxTokens, MaxCostUSD: c.MaxCostUSD, LoopRepeats: c.LoopRepeats, LoopStaleSteps: c.LoopStaleSteps, Context: c.Context}
	agent.Context.Compression = c.compression(c.Context.Compression, actors.Compression{})
	if strategy != disclosure.All {
		agent.Disclosure = d
	}
	// What its delegate tool says of the node's agents, which its tasks record
	// from decision rules 10 (the named agents, built from it, have it too).
	agent.Roster = c.roster()
	if err := c.resolveGather(&agent, "", "", c.Context, true); err != nil {
		return actors.Agent{}, nil, err
	}
	// A session runs the chains among the tools step by step (actors/chain.go).
	for _, name := range reg.Names() {
		if t, _ := reg.Get(name); t != nil {
			if ch, ok := t.(*tools.ChainTool); ok {
				if agent.Chains == nil {
					agent.Chains = map[string]*tools.ChainTool{}
				}
				agent.Chains[name] = ch
			}
		}
	}
	return agent, reg, nil
}

// Node is one running Troupe node.
type Node struct {
	cfg Config
	// panics counts the task messages whose session's actor panicked on them
	// (handleTask).
	panics panicCounts
	// started is when New made the node (Config.Clock): a task record written
	// after it was never read by an earlier version of this node
	// (recordedUnderCoordinates).
	started           time.Time
	log               eventlog.Log
	ownLog            bool
	bus               *EmbeddedBus // the embedded bus, when the node owns one
	pub               message.Publisher
	tasksSub, liveSub message.Subscriber
	system            *actor.ActorSystem
	host              *actor.PID
	// local performs effects on this node; remote, on a node without the tools or
	// models role, asks the nodes that have it.
	local  *actors.LocalEffects
	remote *actors.BusEffects
	// routing is closed once the router runs every handler (Run), the replies'
	// subscription positioned: remote effect requests (BusEffects.Ready) and the
	// memory, notes and knowledge commands sent to their owners wait for it.
	routing     chan struct{}
	routingOnce sync.Once
	own         ownership
	hostStopped atomic.Bool
	// drainTurn is held by the one drainSessions that runs (Revoked's, Close's).
	drainTurn chan struct{}
	outbox    *outbox
	// poisoned are the positions of the tasks topic's records this process sent to
	// TopicPoison (poisonPublisher.sent): one read again is not rejected again.
	poisoned  *boundedSet
	published publishedSeqs    // what this process's sessions handed to outbox (published.go)
	onBus     publishedSeqs    // what a takeover found on the bus already (onbus.go)
	marks     publicationMarks // the batches its sessions are appending and publishing (pubmark.go)
	router    *message.Router
	// admitting are the router's handlers that admit new work, which Close stops
	// first; answering counts the others (stopAdmitting).
	admitting []admittingHandler
	answering int
	served    servedEffects // the effects it performs for others, which Close lets answer
	busLogs   *logShutter   // the bus's and router's logger, shut by Close
	hub       *Hub
	feed      *sessionFeed // GET /v1/feed/sessions
	// folds are the kept folds of the reads of a session's state (statusfold.go).
	folds  statusFolds
	dedupe *deduplicator

	// revokeWithin bounds Revoked as a whole (revokeBudget; tests shorten it).
	revokeWithin time.Duration

	// leased is the session actors' store when the node is sharded on a log that fences.
	leased *leasedStore
	// pauses tells whether the process paused since the node last confirmed it
	// owns a partition (pausewatch.go).
	pauses pauseWatch
	// owner is the node's lease of the whole log when it owns it (logowner.go):
	// log is then the log under it (ownedLog). Nil otherwise.
	owner *logOwner
	// agent is the default agent: its tools are what ToolSpecs and CallTool offer.
	agent actors.Agent
	// routes are the handlers added to the HTTP API (Handle, HandleRoute).
	routes []Route
	// gate checks the HTTP API's requests (tokens, rate limits, CORS).
	gate *gate
	// memories is the agent memory (Config.Memory), nil without one.
	memories   *memory.Memories
	ownVectors io.Closer // the embedded vector index the node opened for memories
	memRouter  memoryRouter
	aside      consolidationsAside // consolidations run for commands (consolidateaside.go)
	kbUploads  kbUploads           // parts of uploads to knowledge bases this node owns (knowledgeroute.go)
	memHost    *actors.MemoryHost  // the namespaces' actors
	memKeys    requestKeys         // the requests of the memory API's recent Idempotency-Keys
	kbKeys     requestKeys         // the requests of the knowledge API's recent Idempotency-Keys
	// memTools are the memory tool's tools by agent ("" for the default agent and
	// every agent without a namespace of its own) and name (Config.MemoryTool), as
	// this node performs them for the namespaces it owns.
	memTools map[string]map[string]tools.Tool
	// notesTools are the notes tool's tools by name, as Config.Notes made them (not
	// routed): what a routed notes call runs on the stream's owner (notesroute.go).
	notesTools map[string]tools.Tool
	// knowledge is the knowledge bases (Config.Knowledge), nil without them;
	// kbVectors the embedded vector index the node opened for them.
	knowledge *knowledge.Bases
	kbVectors io.Closer
	kbOpen    *kbOpener // the bases that exist, for reads
	// consolidation runs the consolidator in the background (Config.Consolidation).
	consolidation *consolidator.Scheduler
	// afterTask remembers completed tasks (Config.MemoryWriteAfterTask).
	afterTask *afterTaskWriter
	// parentEnds cancels the children of a failed task's unanswered delegate
	// calls (delegateends.go); nil on a node without named agents.
	parentEnds *parentEnds

	redactor *redact.Redactor
	// gw is the gateway in front of the node's models (newEffects).
	gw *gateway.Gateway
	// a2aServer serves A2A (a2a.go), built once by a2aRoutes.
	a2aOnce   sync.Once
	a2aServer *a2a.Server
	// keys gives the node's secret key (secretkey.go).
	keys     *secretKeys
	ingress  *Ingress
	stopping chan struct{}
	// sessionsStop is closed once Close drained the sessions: it ends the retries
	// of a session's failing write (actors.SessionDeps.Stopping). Not stopping,
	// which Close closes first: a write that failed once while the calls in flight
	// are answered is retried, so that their answers are recorded.
	sessionsStop chan struct{}
	// submits bounds deliverTask's waits by SubmitTimeout.
	submits *deadline.Shared
	tracing *tracing // the node's traces (tracing.go)
	metrics *Metrics
	// outage tells an outage of the log's writes once (logoutage.go).
	outage      *logOutage
	ran         atomic.Bool
	streamsOnce sync.Once
	streamsDone chan struct{}

	// hostProbe and logProbe probe the session host and the event log for the
	// health checks, one probe at a time each (health.go); logProbe is nil when
	// the log has nothing to tell.
	hostProbe, logProbe *healthProbe
	// busProbe asks the bus whether its brokers can be reached (BusReach); nil
	// when it cannot tell.
	busProbe *healthProbe

	// handedOver is closed once Close handed the partitions' lease over (handOver),
	// for a Revoked that runs after the host stopped.
	handedOver chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// New builds a node. It opens (and locks) the event log; nothing runs until Run.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	cfg.warnUnpricedCosts()
	cfg.warnQuotasOfNoAgent()
	if cfg.Redactor == nil {
		cfg.Redactor = redact.New()
	}
	cfg.Redactor.Add(cfg.Secrets...)
	n := &Node{cfg: cfg, started: cfg.Clock.Now(), log: cfg.Log, streamsDone: make(chan struct{}), stopping: make(chan struct{}), sessionsStop: make(chan struct{}), routing: make(chan struct{}), handedOver: make(chan struct{}), drainTurn: make(chan struct{}, 1), redactor: cfg.Redactor, metrics: newMetrics(),
		submits: deadline.New(cfg.SubmitTimeout), revokeWithin: revokeBudget}
	n.dedupe = newDeduplicator(n.metrics, cacheTTL, 0)
	n.keys = &secretKeys{given: cfg.SecretKey, dir: cfg.DataDir, shared: cfg.Bus != nil, logger: cfg.Logger}
	gate, err := newGate(cfg.HTTP, cfg.Logger, n.redactor)
	if err != nil {
		return nil, err
	}
	n.gate = gate
	n.metrics.Registry.MustRegister(gate.refused)
	n.hub = newHub(nil, nil) // openBus replaces it on a shared bus
	n.ingress = newIngress(n.redactor, cfg.Clock, cfg.IDs)
	if len(cfg.Gateway.Prices) == 0 {
		var once sync.Once
		n.ingress.unpriced = func(string) {
			once.Do(func() {
				cfg.Logger.Warn("a task sets a cost budget (max_cost_usd), but this node's gateway has no price table (\"prices\"): " +
					"the model calls it performs cost 0, and reach no cost budget")
			})
		}
	} else if missing := cfg.unpricedModels(); len(missing) > 0 {
		// Read only from here on: each agent's warning is given once.
		onces := make(map[string]*sync.Once, len(missing))
		for agent := range missing {
			onces[agent] = new(sync.Once)
		}
		n.ingress.unpriced = func(agent string) {
			if agent == "default" {
				agent = ""
			}
			once := onces[agent]
			if once == nil {
				return
			}
			once.Do(func() {
				cfg.Logger.Warn("a task sets a cost budget (max_cost_usd), but this node's price table (\"prices\") has no price for its "+
					unpricedNames(missing[agent])+": the calls to it cost 0, and count nothing toward the budget", "agent", cmp.Or(agent, "default"))
			})
		}
	}
	if err := n.openLog(ctx); err != nil {
		return nil, err
	}
	n.guardLog()
	n.outage = newLogOutage(cfg.Logger, n.log, n.stopping, n.metrics)
	n.outage.queued = n.queuesTasks()
	n.newHealthProbes()
	n.gate.keepSignIns(n.log)
	n.busLogs = &logShutter{}
	wlog := newBusLogger(cfg.Logger, n.busLogs)
	n.openBus(wlog)
	n.metrics.Registry.MustRegister(deltaTailTimeouts(n.hub)) // the hub openBus made
	n.metrics.Registry.MustRegister(strandedGauge(n))
	n.feed = newSessionFeed(n.hub.bus)
	n.hub.tap = n.feed.fromBus
	if b := n.hub.bus; b != nil {
		dropRemote := b.ended
		b.ended = func() { dropRemote(); n.feed.busEnded() }
	}
	n.newActorSystem()
	if err := n.addNotes(); err != nil {
		return nil, n.fail(err)
	}
	if err := n.openMemory(ctx); err != nil {
		return nil, n.fail(err)
	}
	if err := n.addMemoryTool(); err != nil {
		return nil, n.fail(err)
	}
	if err := n.openKnowledge(ctx); err != nil {
		return nil, n.fail(err)
	}
	if err := n.addKnowledgeTool(); err != nil {
		return nil, n.fail(err)
	}
	if err := n.addDelegate(); err != nil {
		return nil, n.fail(err)
	}
	if len(n.cfg.Agents) > 0 {
		n.parentEnds = newParentEnds(n)
	}
	if n.cfg.MemoryTool != nil {
		n.ingress.memory = n.coreMemory
		if n.cfg.MemoryWriteAfterTask {
			n.afterTask = newAfterTaskWriter(n)
		}
	}
	agent, reg, err := n.cfg.agent()
	if err != nil {
		return nil, n.fail(err)
	}
	n.agent = agent
	named, err := n.cfg.namedAgents(agent, reg)
	if err != nil {
		return nil, n.fail(err)
	}
	for _, a := range n.cfg.Agents {
		n.ingress.agents = append(n.ingress.agents, a.Name)
	}
	if n.cfg.Bus != nil {
		n.ingress.topicPrefix = n.cfg.Bus.TopicPrefix
	}
	if err := n.newTracing(ctx); err != nil {
		return nil, n.fail(err)
	}
	effects, err := n.newEffects(reg)
	if err != nil {
		return nil, n.fail(err)
	}
	n.holdServedCalls(reg)
	if err := n.newSessionHost(actors.Agents{Default: agent, Named: named, Rules: n.cfg.DecisionRules}, effects); err != nil {
		return nil, n.fail(err)
	}
	if err := n.newRouter(wlog); err != nil {
		return nil, n.fail(err)
	}
	// Last: a node that failed to be built takes no log from the node serving it.
	if err := n.takeLog(ctx); err != nil {
		return nil, n.fail(err)
	}
	return n, nil
}

func (n *Node) fail(err error) error {
	_ = n.Close()
	return err
}

// errPermanent marks a bus message that can never be handled: it goes to TopicPoison.
var errPermanent = errors.New("permanent failure")

// handleTask is the tasks topic's adapter: it hands a message to the ingress (a
// CancelRequest to handleCancel), forwards it when it was read from a partition
// other than its session's, and otherwise hands the task to its session.
func (n *Node) handleTask(msg *message.Message) error {
	// Every reader of the record below (the ingress, the readers of commands, the
	// refusals that answer a task's client) reads its JSON after any byte order mark.
	msg.Payload = messages.TrimByteOrderMark(msg.Payload)
	// The three parts are functions of their own, called one after the other, so
	// that a message's goroutine (Watermill starts one for each) holds the stack
	// of one of them at a time rather than of all three: a goroutine's stack
	// starts small and grows by copying, and the decoding's stack comes on top.
	typ, task, err := n.routeTaskRecord(msg)
	if !task {
		return err
	}
	var rec taskRecord
	if done, err := n.decodeTaskRecord(msg, typ, &rec); done {
		return err
	}
	return n.submitTaskRecord(msg, &rec)
}

// taskRecord is a task read from the tasks topic, decoded (decodeTaskRecord).
type taskRecord struct {
	arrival Arrival
	env     messages.Envelope
	task    *messages.TaskSubmitted // env's payload, decoded; nil if not at hand
}

// routeTaskRecord hands a record of the tasks topic that is no task to its
// handler, or refuses it, and returns that handler's answer; or reports that the
// record is a task (true), and its type header (typ: empty, or task.submitted).
func (n *Node) routeTaskRecord(msg *message.Message) (typ string, task bool, err error) {
	if repeated := msg.Metadata.Get(messages.MetaRepeatedHeaders); repeated != "" {
		// A record that gives a header different values (kcat -H type=task.submitted
		// -H type=task.cancel) reaches the node with the last one only: run as it,
		// a cancellation could start the work it meant to stop. One whose session_id
		// header names another session than its key would run in the header's.
		// Its client, when the body says where it waits, is told (without the
		// headers' values, which the list cuts where a secret may run on).
		return typ, false, n.refuseUndecoded(msg,
			fmt.Errorf("%w: message %s: its record gives a header more than one value, or a session_id header other than its key (%s): this node cannot tell which is meant: give each header once, and a session_id header only with its session's key",
				errPermanent, idHead(msg.UUID), repeated),
			repeatedHeadersRefusal(repeated))
	}
	typ, header, err := taskTopicType(msg)
	if err != nil {
		return typ, false, n.refuseUndecoded(msg, fmt.Errorf("%w: message %s: %w", errPermanent, idHead(msg.UUID), err), err)
	}
	switch typ {
	case messages.TypeCancelRequested, messages.TypeApprovalAnswer, messages.TypeMemoryCommand, messages.TypeDeltaWatch:
		if len(msg.Payload) == 0 {
			// As for a task (Ingress.decode): "corrupt envelope: EOF" would not say
			// which part of the record was wrong.
			return typ, false, fmt.Errorf("%w: message %s: the %s record has no value (empty, or null: a tombstone): a %s is a JSON object",
				errPermanent, idHead(msg.UUID), typ, typ)
		}
	}
	switch typ {
	case messages.TypeCancelRequested:
		return typ, false, n.handleCancel(msg)
	case messages.TypeApprovalAnswer:
		return typ, false, n.handleApproval(msg)
	case messages.TypeMemoryCommand:
		return typ, false, n.handleMemoryCommand(msg)
	case messages.TypeDeltaWatch:
		return typ, false, n.handleDeltaWatch(msg)
	case "", string(messages.TypeTaskSubmitted):
	default:
		// A type this node does not know (a typo such as "task.cancle", a kind of
		// message of a newer build) is not a task: run as one, a cancellation
		// would start the work it meant to stop.
		refusal := fmt.Errorf("%w: unknown type %s (header %s): the tasks topic takes a task (no type header, or %q), %q, %q, %q or %q",
			ErrBadTask, QuoteHead(typ), QuoteHead(header), messages.TypeTaskSubmitted,
			messages.TypeCancelRequested, messages.TypeApprovalAnswer, messages.TypeMemoryCommand, messages.TypeDeltaWatch)
		return typ, false, n.refuseUndecoded(msg, fmt.Errorf("%w: message %s: %w", errPermanent, idHead(msg.UUID), refusal), refusal)
	}
	return typ, true, nil
}

// decodeTaskRecord decodes a task's record into rec. done, it has handled the
// record: err is the handler's answer (a bad task refused, or a stored task that
// could not be read, retried).
func (n *Node) decodeTaskRecord(msg *message.Message, typ string, rec *taskRecord) (done bool, err error) {
	rec.arrival = arrivalOf(msg)
	arrival := &rec.arrival
	if rt, ok := n.tasksSub.(RecordTimer); ok {
		arrival.SentAt, _ = rt.MessageTime(msg)
	}
	if stream := msg.Metadata.Get(messages.MetaStored); stream != "" {
		// A task too large for the bus: its reference names where the log holds it (a
		// forwarded one stays a reference).
		b, err := n.storedTask(msg.Context(), stream)
		if err != nil {
			return true, fmt.Errorf("task message %s: %w", msg.UUID, err)
		}
		arrival.Payload = b
	}
	rec.env, rec.task, _, err = n.ingress.decode(*arrival)
	if err != nil {
		return true, n.refuseBadTask(msg, *arrival, typ, err)
	}
	return false, nil
}

// refuseBadTask answers a task's record that the ingress could not decode (err)
// and returns the handler's answer.
func (n *Node) refuseBadTask(msg *message.Message, arrival Arrival, typ string, err error) error {
	if errors.Is(err, ErrBadTask) {
		refusal := err
		if msg.Metadata.Get(messages.MetaStored) == "" && notATaskBody(msg) != "" { // a stored task is a task's envelope
			// Read as a task, but with no member of a task's but session_id and
			// task_id: a task whose input was left out, or a cancellation or an
			// approval sent without its type header (kcat -P with no -H
			// type=...). Its sender waits either way: it is told what is
			// missing, in a result marked type=task.rejected that names the
			// record's task_id (else its ID), not the task running in the
			// session (rejectTask publishes none when a task of the session
			// has that task_id).
			refusal = noInputRefusal(typ)
			if isApprovalRecord(msg) {
				// An approval sent without its type header: told as
				// an approval refused, naming its session and call.
				if forwarded, err := n.refuseMalformedApproval(msg, refusal); forwarded || err != nil {
					return err // retried, or judged on its session's owner
				}
				return fmt.Errorf("%w: task message %s: %w", errPermanent, idHead(msg.UUID), err)
			}
		}
		// Judged on its session's owner, after the records of the session
		// before it (forwardRefused): a cancellation sent without its type
		// header, or a named task sent again with a body the rules refuse,
		// right behind its task on another partition.
		if forwarded, err := n.forwardRefused(msg, arrival, refusal); forwarded || err != nil {
			return err
		}
		if err := n.rejectTask(msg, arrival, refusal); err != nil {
			// Its client waits for a result: it is told why before the record
			// is poisoned, or the record is handled again.
			return err // retried
		}
	}
	return fmt.Errorf("%w: task message %s: %w", errPermanent, idHead(msg.UUID), err)
}

// submitTaskRecord forwards a decoded task to its session's partition when it
// was read from another, and otherwise hands it to its session, and returns the
// handler's answer.
func (n *Node) submitTaskRecord(msg *message.Message, rec *taskRecord) error {
	arrival, env, task := rec.arrival, rec.env, rec.task
	// A copy too large for the bus goes as a task too large for it does: its
	// envelope, stored in the log.
	stored := func() (*message.Message, error) {
		b, err := messages.Marshal(env)
		if err != nil {
			return nil, err
		}
		return n.taskRef(msg.Context(), env, b)
	}
	// A task with a deadline goes to its session's partition as its envelope, whose
	// deadline is absolute, counted from the record its client wrote (RecordTimer):
	// the forward is a record as new as the forward, which a node makes only as it
	// reads the record, perhaps long after (the nodes were down, or behind), and a
	// task read after its deadline must fail at once wherever it was placed. (A
	// reference to a stored task names an envelope already.)
	var (
		as  []byte
		err error
	)
	if msg.Metadata.Get(messages.MetaStored) == "" && task.DeadlineUS != 0 {
		if as, err = messages.Marshal(env); err != nil {
			return fmt.Errorf("task message %s: encode its envelope to forward it: %w", msg.UUID, err) // retried
		}
	}
	if forwarded, err := n.forward(msg, as, env.SessionID, stored); forwarded || err != nil {
		return err
	}
	if session, recorded, found, err := n.recordedUnderCoordinates(msg.Context(), msg.UUID, env); err != nil {
		return err // retried
	} else if found {
		n.cfg.Logger.Warn("task record read again: an earlier version recorded it under its coordinates' ID; not run again",
			"message", idHead(msg.UUID), "session", session, "recorded", recorded)
		return nil
	}
	if n.tracing.on() {
		var end func()
		env, end = n.tracing.stamp(telemetry.Extract(msg.Context(), msg.Metadata), env)
		defer end()
		task = nil // the stamp may have changed the payload
	}
	// The session takes the payload the ingress decoded instead of decoding it again.
	res, err := n.submitBusTask(env, task)
	if err != nil {
		return fmt.Errorf("task %s for session %s: %w", env.ID, env.SessionID, err) // retried
	}
	if acc, ok := res.(*actors.TaskAccepted); ok && acc.Duplicate {
		// Its ID is recorded: a redelivery, or another task under a reused ID.
		named, err := n.checkRedelivery(msg.Context(), env)
		if err != nil || named.ID == "" {
			return err
		}
		// Or a named task sent again: its client may wait for its result.
		return n.answerResent(msg, env, named, arrival.SentAt)
	}
	err, failed := res.(error)
	// The log refused the task's append as taking what another event holds: its
	// ID, when a record's UUID header (which names the task) repeats another
	// session's event's. A race with another writer of the session is over at the
	// next attempt, whose actor folds the log again; an ID taken stays taken.
	refused := failed && errors.Is(err, actors.ErrSessionFailed) && errors.Is(err, eventlog.ErrSeqConflict)
	if !failed || !errors.Is(err, actors.ErrSessionPanicked) && !refused {
		n.panics.forget(msg.UUID)
	} else if n.panics.again(msg.UUID) >= panicsBeforePoison {
		// A bug the session's actor meets on this task every time (its next actor
		// folds the same log and decides the same way), or an ID the log holds for
		// another event: retried, it would hold the session's later messages, and
		// its partition, for good.
		n.panics.forget(msg.UUID)
		if refused {
			err := fmt.Errorf("%w: task %s for session %s: the event log refused it %d times in a row as another event's (a record's _watermill_message_uuid header is its task's ID: one that repeats the ID of another session's task or event is refused): %w",
				errPermanent, env.ID, env.SessionID, panicsBeforePoison, err)
			return err
		}
		return fmt.Errorf("%w: task %s for session %s: the session's actor panicked on it %d times in a row: %w",
			errPermanent, env.ID, env.SessionID, panicsBeforePoison, err)
	}
	if failed && errors.Is(err, actors.ErrQueueFull) {
		// Its session holds MaxQueuedTasks tasks waiting already: retried, the
		// task would hold its partition, every other session's on it, until the
		// queue drained. Its client is told, as for a task refused as bad, and
		// sends it again.
		refusal := fmt.Errorf("%w: %w", ErrBadTask, err)
		if err := n.rejectTask(msg, arrival, refusal); err != nil {
			return err // retried
		}
		return fmt.Errorf("%w: task %s for session %s: %w", errPermanent, env.ID, env.SessionID, refusal)
	}
	if failed {
		if errors.Is(err, actors.ErrNotOwner) || errors.Is(err, actors.ErrSessionFailed) || errors.Is(err, eventlog.ErrFull) {
			// The partition is moving: its next owner reads the task again. Or the
			// session's actor failed: its next one, which a retry starts, may take it.
			// Or the log had no room for it (a full disk): the task is sound, and the
			// bus holds it until space is freed (a client over HTTP is told 503 and
			// sends it again; a task from the bus has nobody to tell).
			return fmt.Errorf("task %s: %w", env.ID, err)
		}
		return fmt.Errorf("%w: task %s for session %s: %w", errPermanent, env.ID, env.SessionID, err)
	}
	return nil
}

// submitBusTask hands a task read from the bus to its session and returns the
// session's answer (a *actors.TaskAccepted or an error), or actor.ErrTimeout after
// SubmitTimeout, as a request's future would, through a channel instead: a future
// registers a process and starts a timer of its own for each task.
func (n *Node) submitBusTask(env messages.Envelope, task *messages.TaskSubmitted) (any, error) {
	reply := make(chan any, 1)
	n.system.Root.Send(n.host, &actors.SubmitTask{Envelope: env, Task: task, Reply: reply})
	wait := time.NewTimer(n.cfg.SubmitTimeout)
	defer wait.Stop()
	select {
	case res := <-reply:
		return res, nil
	case <-wait.C:
		return nil, actor.ErrTimeout
	}
}

// taskTopicType returns the type of a message read from the tasks topic, and the
// name of the header it was read from: its type header (messages.MetaType), which
// every node writes. Kafka header names are case-sensitive, but a producer that
// wrote Type or TYPE (kcat -H Type=task.cancel) meant the type: read without it,
// a cancellation would run as a task. So a header whose name is "type" in another
// case is read as the type too, and headers that disagree (type=task.submitted
// and Type=task.cancel; Type and TYPE) are refused (ErrBadTask), naming them,
// rather than one picked. A message without any is a task ("").
func taskTopicType(msg *message.Message) (typ, header string, err error) {
	typ, exact := msg.Metadata[messages.MetaType]
	header = messages.MetaType
	agree := true
	for k, v := range msg.Metadata {
		if k == messages.MetaType || !strings.EqualFold(k, messages.MetaType) {
			continue
		}
		switch {
		case !exact && header == messages.MetaType:
			typ, header = v, k
		case v != typ:
			agree = false
		}
	}
	if agree {
		return typ, header, nil
	}
	var names []string
	for k := range msg.Metadata {
		if strings.EqualFold(k, messages.MetaType) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	headers := make([]string, len(names))
	for i, k := range names {
		headers[i] = QuoteHead(k) + "=" + QuoteHead(msg.Metadata[k])
	}
	return "", "", fmt.Errorf("%w: its type headers disagree (%s): Kafka header names are case-sensitive, and this node reads any case of %q as the type: give one type header",
		ErrBadTask, strings.Join(headers, ", "), messages.MetaType)
}

// repeatedHeadersRefusal is what the rejected result of a record that gives a
// header different values says (list is its messages.MetaRepeatedHeaders): the
// headers' names, not their values, which the list quotes by their heads.
func repeatedHeadersRefusal(list string) error {
	const fix = "this node cannot tell which is meant: give each header once, and a session_id header only with its session's key"
	names, key, ok := messages.RepeatedHeaderNames(list)
	if !ok {
		return fmt.Errorf("%w: its record gives a header more than one value, or a session_id header other than its key: %s", ErrBadTask, fix)
	}
	var what []string
	if key {
		what = append(what, "a "+messages.MetaSessionID+" header other than its key")
	}
	var quoted []string
	for _, name := range names {
		if !key || name != messages.MetaSessionID { // listed as the key's contradiction
			quoted = append(quoted, QuoteHead(name))
		}
	}
	switch len(quoted) {
	case 0:
	case 1:
		what = append(what, "more than one value to the header "+quoted[0])
	default:
		what = append(what, "more than one value to each of the headers "+strings.Join(quoted, ", "))
	}
	return fmt.Errorf("%w: its record gives %s: %s", ErrBadTask, strings.Join(what, ", and "), fix)
}

// Run serves until ctx is done: it resumes sessions left running by an earlier
// process, then routes tasks. It returns after the router stopped.
func (n *Node) Run(ctx context.Context) error {
	n.ran.Store(true)
	expireCtx, stopExpiring := context.WithCancel(ctx)
	expired := make(chan struct{})
	go func() { defer close(expired); n.expireCaches(expireCtx) }()
	defer func() { stopExpiring(); <-expired }()
	caughtUp := make(chan struct{})
	go func() { defer close(caughtUp); n.catchUpVectors(expireCtx) }()
	defer func() { stopExpiring(); <-caughtUp }()
	if p, ok := n.log.(eventlog.Pruner); ok && n.cfg.Bus != nil && n.cfg.Bus.StoredRetention >= 0 {
		pruned := make(chan struct{})
		go func() { defer close(pruned); n.pruneStored(expireCtx, p) }()
		defer func() { stopExpiring(); <-pruned }()
	}
	// The turns a node closed or killed before it remembered them are remembered
	// before those of the tasks it completes from now (memoryagent.go); a sharded
	// node looks for them in the partitions it is assigned instead.
	if n.afterTask != nil && !n.sharded() && n.cfg.Roles.Has(RoleSessions) {
		n.afterTask.recover(func(id string) bool { return n.cfg.Resume == nil || n.cfg.Resume(id) })
	}
	errc := make(chan error, 1)
	go func() { errc <- n.router.Run(ctx) }()
	select {
	case <-n.router.Running():
		n.routingOnce.Do(func() { close(n.routing) })
	case err := <-errc:
		return err
	}
	if n.leased != nil {
		watched := make(chan struct{})
		go func() { defer close(watched); n.watchPauses(expireCtx) }()
		defer func() { stopExpiring(); <-watched }()
	}
	if n.owner != nil {
		taken := make(chan struct{})
		go func() { defer close(taken); n.stopWhenTaken(expireCtx) }()
		defer func() { stopExpiring(); <-taken }()
	}
	// A sharded node resumes the sessions of the partitions it is assigned instead.
	// The resume (whose listing is retried while the log is out) runs beside the
	// router: a router that stops (ctx done, or an error) ends it, and Run returns
	// the router's error without waiting out the retries.
	if !n.sharded() && n.cfg.Roles.Has(RoleSessions) {
		resumeCtx, stopResume := context.WithCancel(ctx)
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			if err := n.resume(resumeCtx); err != nil && resumeCtx.Err() == nil {
				n.cfg.Logger.Error("resume sessions", "err", err)
			}
		}()
		err := <-errc
		stopResume()
		<-resumed
		return err
	}
	return <-errc
}

// cacheTTL is how long a node remembers the ID of a bus message it handled (the
// deduplicator) and the answer to an effect it performed (LocalEffects);
// expireEvery is how often it forgets older ones when no traffic does it.
const (
	cacheTTL    = 10 * time.Minute
	expireEvery = time.Minute
)

// expireCaches calls expireIdle every expireEvery, until ctx is done or the node
// closes: an idle node gives the memory of what expired back.
func (n *Node) expireCaches(ctx context.Context) {
	n.every(ctx, expireEvery, n.expireIdle)
}

// expireIdle forgets, as of now, the expired message IDs and effect answers, and
// the parts of the knowledge base uploads that stopped coming (kbUploads.expire).
func (n *Node) expireIdle(now time.Time) {
	n.dedupe.expire(now)
	n.local.Expire(now)
	n.kbUploads.expire(now)
}

// every calls do with the tick's time every d, until ctx is done or the node
// closes: the node's background loops (expireCaches, watchPauses,
// catchUpVectors).
func (n *Node) every(ctx context.Context, d time.Duration, do func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.stopping:
			return
		case now := <-t.C:
			do(now)
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

// ResumeNone is a Config.Resume that resumes no session.
func ResumeNone(string) bool { return false }

// resume wakes every session whose latest task is unfinished and that Config.Resume picks.
func (n *Node) resume(ctx context.Context) error {
	var infos []eventlog.SessionInfo
	err := n.untilRead(ctx, "list the unfinished sessions to resume", func() bool { return ctx.Err() == nil }, func(lctx context.Context) (err error) {
		infos, err = n.log.Sessions(lctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
		return err
	})
	if err != nil {
		return err
	}
	var ids []string
	var resumed []eventlog.SessionInfo
	for _, s := range infos {
		if !eventlog.IsSession(s.ID) || n.cfg.Resume != nil && !n.cfg.Resume(s.ID) {
			continue // a notes stream is no session
		}
		ids = append(ids, s.ID)
		resumed = append(resumed, s)
	}
	if len(ids) > 0 {
		n.cfg.Logger.Info("resuming unfinished sessions", "count", len(ids))
		n.resumeSessions(ctx, ids, func() bool { return true })
		if n.parentEnds != nil {
			// Children whose parents' tasks failed while the node was down, or as it
			// closed, are cancelled.
			n.parentEnds.resumed(resumed)
		}
	}
	// Failed parents whose children's ends may not be recorded on them yet
	// (lateanswers.go) start waiting for them again. Their listing is retried
	// through a log blip (untilRead), as the one above: before, a failed one was
	// logged, and the ends were never recorded on their parents.
	var parents []string
	err = n.untilRead(ctx, "list the failed parents of recent sub-agents", func() bool { return ctx.Err() == nil }, func(lctx context.Context) (err error) {
		parents, err = n.lateParents(lctx, func(id string) bool { return n.cfg.Resume == nil || n.cfg.Resume(id) })
		return err
	})
	if err != nil {
		n.cfg.Logger.Warn("delegate: list the failed parents of recent sub-agents; the sub-agents' ends not recorded on them yet are not", "err", err)
	} else if len(parents) > 0 {
		n.resumeSessions(ctx, parents, func() bool { return true })
	}
	return nil
}

// resumeSessions wakes the sessions ids (ResumeSession), Config.ResumeConcurrency
// at a time: each is answered once its session read its log, so that a node
// resuming many reads a few sessions' logs at once, and leaves the log's other
// connections to the rest of the node. It stops early when ctx ends or current
// reports false (the node's partitions changed); a session not resumed then, or
// whose resumption failed, is resumed by the next task that reaches it or by its
// next owner.
// It reports whether every session was resumed: all of them handed to the host
// while current held, and each answered.
func (n *Node) resumeSessions(ctx context.Context, ids []string, current func() bool) bool {
	work := make(chan string)
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		last   atomic.Value // the last failure's error
	)
	for range min(n.cfg.ResumeConcurrency, len(ids)) {
		wg.Go(func() {
			for id := range work {
				if _, err := n.system.Root.RequestFuture(n.host, &actors.ResumeSession{SessionID: id}, n.cfg.SubmitTimeout).Result(); err != nil {
					failed.Add(1)
					last.Store(fmt.Errorf("session %s: %w", id, err))
				}
			}
		})
	}
	fed := 0
feed:
	for _, id := range ids {
		if !current() {
			break
		}
		select {
		case work <- id:
			fed++
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	complete := fed == len(ids)
	if f := failed.Load(); f > 0 {
		complete = false
		n.cfg.Logger.Warn("some sessions could not be resumed; each resumes with its next task or owner", "failed", f, "of", len(ids), "last_err", last.Load())
	}
	return complete
}

// Task is what ingress accepts: the body of POST /v1/tasks and of a troupe.tasks message.
type Task struct {
	// ID, set by a Go caller (no JSON body carries it), is the task's message ID,
	// which its task.submitted event takes: a task submitted again under the same ID
	// is recorded once, and TaskResult finds it. Empty: a new one.
	ID    string `json:"-"`
	Input string `json:"input"`
	// TaskID, optional, is the client's name for the task (a JSON body's task_id):
	// the task's result says it (messages.TaskResult.TaskID), and the session
	// records a task of that name once, however often it is sent (on another
	// session, it is another task). It follows TaskIDRule. The task's event ID is
	// derived from it and the session; a task that names no session runs in one
	// named after it ("task.<task_id>"), so that it sent again is the same task.
	// Neither ID nor an Idempotency-Key may be given with it: each names the task.
	TaskID    string `json:"task_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Agent     string `json:"agent,omitempty"`
	MaxSteps  int    `json:"max_steps,omitempty"`
	// MaxTokens is the task's token budget, prompt and completion tokens together
	// (messages.TaskSubmitted.MaxTokens), at most MaxTokenBudget; 0 means its agent's.
	MaxTokens int `json:"max_tokens,omitempty"`
	// MaxCostUSD is the task's cost budget in US dollars, the cost of its model calls
	// and its sub-agents' together, as the gateway's prices say
	// (messages.TaskSubmitted.MaxCostUSD), at most MaxCostBudget; 0 means its agent's.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// DeadlineMS is a relative deadline in milliseconds from submission, at most
	// MaxDeadline; 0 means none.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// ReplyTopic, when set, also receives the task's result: a legal Kafka topic name
	// that is none of the node's own topics.
	ReplyTopic string `json:"reply_topic,omitempty"`
	// Depth, set by a Go caller (no JSON body carries it), is how deep a
	// sub-agent the task's session is though the task has no parent
	// (messages.TaskSubmitted.Depth): a new task of a fork of a child session
	// keeps the child's depth (replay fork --input). 0 to MaxDelegationDepth;
	// 0, a session that is no sub-agent.
	Depth int `json:"-"`
}

// MaxDeadline bounds a task's relative deadline (Task.DeadlineMS).
const MaxDeadline = 30 * 24 * time.Hour

// MaxTokenBudget bounds a token budget: a task's (Task.MaxTokens) and an agent's
// (NamedAgent.MaxTokens).
const MaxTokenBudget = 100_000_000

// warnUnpricedCosts logs that a cost budget is configured while the gateway has no
// price table: every model call then costs 0, and no cost budget is ever reached;
// or while the table has no price for a model its agent's calls go to
// (unpricedModels): those calls cost 0, and count nothing toward the budget.
func (c Config) warnUnpricedCosts() {
	if len(c.Gateway.Prices) > 0 {
		missing := c.unpricedModels()
		for _, a := range c.Agents {
			if names := missing[a.Name]; a.MaxCostUSD > 0 && len(names) > 0 {
				c.Logger.Warn("agent " + a.Name + " has a cost budget (max_cost_usd), but the price table (\"prices\") has no price for its " +
					unpricedNames(names) + ": the calls to it cost 0, and count nothing toward the budget")
			}
		}
		if names := missing[""]; c.MaxCostUSD > 0 && len(names) > 0 {
			c.Logger.Warn("the default agent has a cost budget (max_cost_usd), but the price table (\"prices\") has no price for its " +
				unpricedNames(names) + ": the calls to it cost 0, and count nothing toward the budget")
		}
		return
	}
	for _, a := range c.Agents {
		if a.MaxCostUSD > 0 {
			c.Logger.Warn("agent " + a.Name + " has a cost budget (max_cost_usd), but the gateway has no price table (\"prices\"): its model calls cost 0, and the budget is never reached")
		}
	}
	if c.MaxCostUSD > 0 {
		c.Logger.Warn("the default agent has a cost budget (max_cost_usd), but the gateway has no price table (\"prices\"): its model calls cost 0, and the budget is never reached")
	}
}

// unpricedModels returns, by agent name ("" for the default agent), the names of
// the models its calls go to (its chain of models, else the node's; its critic's;
// its summaries'; a team's, its members' too) that the gateway's price table has
// no price for, in the order they come; an agent whose models all have one is
// left out. The gateway prices a call by its model's name (gateway.Pricing):
// these calls cost 0.
func (c Config) unpricedModels() map[string][]string {
	out := map[string][]string{}
	add := func(agent string, models ...llm.Model) {
		for _, m := range models {
			if m == nil {
				continue
			}
			if _, ok := c.Gateway.Prices[m.Name()]; !ok && !slices.Contains(out[agent], m.Name()) {
				out[agent] = append(out[agent], m.Name())
			}
		}
	}
	own := func(agent string, a NamedAgent) {
		if a.Model != nil {
			add(agent, append([]llm.Model{a.Model}, a.Fallbacks...)...)
		} else {
			add(agent, append([]llm.Model{c.Model}, c.Fallbacks...)...)
		}
		add(agent, a.CriticModel, a.SummaryModel)
	}
	add("", append([]llm.Model{c.Model}, c.Fallbacks...)...)
	for _, a := range c.Agents {
		own(a.Name, a)
		if a.Team == nil {
			continue
		}
		for _, m := range a.Team.Members {
			if i := slices.IndexFunc(c.Agents, func(b NamedAgent) bool { return b.Name == m.Name }); i >= 0 {
				own(a.Name, c.Agents[i])
			}
		}
	}
	return out
}

// unpricedNames says "model NAME" or "models NAME, NAME" of names.
func unpricedNames(names []string) string {
	if len(names) == 1 {
		return "model " + names[0]
	}
	return "models " + strings.Join(names, ", ")
}

// warnQuotasOfNoAgent logs each gateway quota of an agent the node does not have
// ("agent:asistant" for "assistant"): no call is charged to it, so it never
// refuses one.
func (c Config) warnQuotasOfNoAgent() {
	agents := []string{"default"}
	for _, a := range c.Agents {
		agents = append(agents, a.Name)
	}
	for _, q := range c.Gateway.Quotas {
		kind, name, _ := strings.Cut(q.Scope, ":")
		if kind == "agent" && name != "*" && !slices.Contains(agents, name) {
			c.Logger.Warn("a quota names an agent this node does not have, and never refuses a call",
				"quota", q.Scope, "agents", strings.Join(agents, ", "))
		}
	}
}

// QuoteHead quotes s (%q) for an error, its first 64 bytes and their length when
// longer (messages.QuoteHead).
func QuoteHead(s string) string { return messages.QuoteHead(s) }

// MaxCostBudget bounds a cost budget in US dollars: a task's (Task.MaxCostUSD) and
// an agent's (NamedAgent.MaxCostUSD).
const MaxCostBudget = 1_000_000

// maxTopicName is the longest topic name Kafka accepts (kafka.MaxTopicNameLength).
const maxTopicName = 249

// ownTopics are the topics of the node's layout (deploy/kafka/topics.txt and the
// poison topic). A reply topic must be none of them, with or without a prefix.
func ownTopics() []string {
	return []string{messages.TopicTasks, messages.TopicEvents, messages.TopicResults,
		messages.TopicToolRequests, messages.TopicModelRequests, messages.TopicReplies, messages.TopicEffectCancels, TopicPoison,
		messages.TopicDeltas}
}

// ownNamespace starts the name of every topic of the node's own.
const ownNamespace = "troupe."

// CheckLayoutTopics reports a topic of a topics layout (--topics) in the node's
// own "troupe." namespace that is none of the node's topics: a typo (troupe.task),
// which left the topic meant with the default layout, one replica, unsaid.
func CheckLayoutTopics(names []string) error {
	own := ownTopics()
	for _, name := range slices.Sorted(slices.Values(names)) {
		if strings.HasPrefix(name, ownNamespace) && !slices.Contains(own, name) {
			slices.Sort(own)
			return fmt.Errorf("topic %q is not a topic of the node, and its namespace %q is the node's: the node's topics are %s", name, ownNamespace, strings.Join(own, ", "))
		}
	}
	return nil
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// SessionIDRule says which strings ValidSessionID accepts, for error messages.
const SessionIDRule = "1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit"

// ValidSessionID reports whether id can name a session (SessionIDRule). Every way a
// session enters a log checks it: ingress (HTTP, the tasks topic), replay import and fork.
func ValidSessionID(id string) bool {
	// sessionIDPattern, without a regexp (every task of the tasks topic is checked).
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || i > 0 && (c == '.' || c == '_' || c == ':' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// TaskIDRule says which strings a task_id may be (Task.TaskID): those of
// SessionIDRule.
const TaskIDRule = SessionIDRule

// ErrBadTask is wrapped by every validation error of a submitted task.
var ErrBadTask = errors.New("bad task")

// Validate reports what is wrong with a task, if anything. Every ingress calls it:
// Submit (the CLI, POST /v1/tasks) and the tasks topic, for plain JSON tasks and
// task.submitted envelopes alike.
func (t Task) Validate() error {
	switch {
	case t.Input == "":
		return fmt.Errorf("%w: input is required", ErrBadTask)
	case strings.TrimSpace(t.Input) == "":
		return fmt.Errorf("%w: input is blank (only white space)", ErrBadTask)
	case len(t.Input) > 1<<20:
		return fmt.Errorf("%w: input is %d bytes, the limit is 1 MiB", ErrBadTask, len(t.Input))
	case t.SessionID != "" && !ValidSessionID(t.SessionID):
		return fmt.Errorf("%w: session_id must be %s", ErrBadTask, SessionIDRule)
	case t.TaskID != "" && !ValidSessionID(t.TaskID):
		return fmt.Errorf("%w: task_id %s: must be %s", ErrBadTask, QuoteHead(t.TaskID), TaskIDRule)
	case t.TaskID != "" && t.ID != "":
		return fmt.Errorf("%w: a task with a task_id (%q) and an ID (%q): give one, both name the task", ErrBadTask, t.TaskID, t.ID)
	case t.MaxSteps < 0 || t.MaxSteps > 1000:
		return fmt.Errorf("%w: max_steps must be between 0 and 1000", ErrBadTask)
	case t.MaxTokens < 0 || t.MaxTokens > MaxTokenBudget:
		return fmt.Errorf("%w: max_tokens must be between 0 and %d (0 or left out: the agent's budget); got %d", ErrBadTask, MaxTokenBudget, t.MaxTokens)
	case !validCost(t.MaxCostUSD):
		return fmt.Errorf("%w: max_cost_usd must be between 0 and %d US dollars (0 or left out: the agent's budget); got %g", ErrBadTask, MaxCostBudget, t.MaxCostUSD)
	case t.DeadlineMS < 0 || t.DeadlineMS > MaxDeadline.Milliseconds():
		return badDeadline(strconv.FormatInt(t.DeadlineMS, 10))
	case t.Agent != "" && !agentNamePattern.MatchString(t.Agent):
		return fmt.Errorf("%w: agent %s: want %s", ErrBadTask, QuoteHead(t.Agent), AgentNameRule)
	case t.Depth < 0 || t.Depth > MaxDelegationDepth:
		return fmt.Errorf("%w: depth %d: a task's session is 0 to %d deep", ErrBadTask, t.Depth, MaxDelegationDepth)
	case t.ReplyTopic != "":
		return checkReplyTopic(t.ReplyTopic)
	}
	return nil
}

func badDeadline(got string) error {
	return fmt.Errorf("%w: deadline_ms must be between 1 and %d (30 days), or left out for no deadline; got %s",
		ErrBadTask, MaxDeadline.Milliseconds(), got)
}

// checkReplyTopic reports a reply topic Kafka would refuse, or one of the node's own
// topics: a result published to troupe.tasks would come back as a task, and with a
// topic prefix (prod.troupe.tasks) into another cluster's ingress.
func checkReplyTopic(topic string) error {
	if len(topic) > maxTopicName {
		return fmt.Errorf("%w: reply_topic is %d characters long; Kafka allows at most %d", ErrBadTask, len(topic), maxTopicName)
	}
	for _, c := range topic {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: reply_topic %q has %q; Kafka topic names allow only ASCII letters, digits, '.', '_' and '-'", ErrBadTask, topic, c)
		}
	}
	if topic == "." || topic == ".." {
		return fmt.Errorf("%w: reply_topic %q is not a legal Kafka topic name", ErrBadTask, topic)
	}
	if strings.HasPrefix(topic, "__") {
		// Kafka's own (__consumer_offsets, __transaction_state, …): the broker
		// never takes a client's record there.
		return fmt.Errorf("%w: reply_topic %q starts with \"__\", as Kafka's internal topics do (__consumer_offsets, __transaction_state), which take no client's records", ErrBadTask, topic)
	}
	// Kafka treats '.' and '_' in topic names alike: troupe_results collides with
	// troupe.results (created first, it takes its place; created second, it is
	// refused).
	same := strings.ReplaceAll(topic, "_", ".")
	if strings.HasPrefix(same, ownNamespace) {
		return fmt.Errorf("%w: reply_topic %q is in the node's own %q namespace (Kafka treats '.' and '_' in topic names alike)", ErrBadTask, topic, ownNamespace)
	}
	for _, own := range ownTopics() {
		if strings.HasSuffix(same, own) {
			return fmt.Errorf("%w: reply_topic %q is the node's own topic %s behind a prefix (Kafka treats '.' and '_' in topic names alike)", ErrBadTask, topic, own)
		}
	}
	return nil
}

// Submit validates a task and publishes it on messages.TopicTasks. It returns the
// session ID (a new one when the task names none). On the embedded bus it returns once
// the session recorded the task, waiting at most Config.SubmitTimeout, and returns the
// error a session refused the task with; on Kafka, once the broker acknowledged the
// record (acks=all): the task is durable there, and the owning node records it when
// it consumes the partition.
func (n *Node) Submit(ctx context.Context, t Task) (string, error) {
	env, task, err := n.ingress.admitValue(t)
	if err != nil {
		return "", err
	}
	return n.submitNew(ctx, env, task, t.ID == "" && t.TaskID == "" && n.ingress.uniqueIDs())
}

// Submitted says what a submitted task is: its session, and its task ID, which its
// result carries (messages.TaskResult.TaskID).
type Submitted struct {
	SessionID string `json:"session_id"`
	// TaskID is the task's task_id when it named one (Task.TaskID), else the ID of
	// its task.submitted event.
	TaskID string `json:"task_id"`
}

// SubmitFrom decodes and checks what a source read (Ingress.Decode) and submits the
// task as Submit does. Every error for a task that breaks a rule wraps ErrBadTask;
// others say why the task was not accepted.
func (n *Node) SubmitFrom(ctx context.Context, a Arrival) (Submitted, error) {
	env, task, named, err := n.ingress.decode(a)
	if err != nil {
		return Submitted{}, err
	}
	session, err := n.submitNew(ctx, env, task, named == "" && n.ingress.mintsID(a))
	if err != nil {
		return Submitted{}, err
	}
	return Submitted{SessionID: session, TaskID: cmp.Or(named, env.ID)}, nil
}

// submit publishes an admitted task (Ingress) on messages.TopicTasks, as Submit
// says: the one way a task from Go code, the CLI, HTTP (and next MCP and A2A)
// reaches its session.
func (n *Node) submit(ctx context.Context, env messages.Envelope) (string, error) {
	return n.submitNew(ctx, env, nil, false)
}

// submitNew is submit; newID says that the ingress made env.ID, with IDs that are
// unique (Ingress.mintsID): with a log that cannot claim sessions, on the embedded
// bus, a new session then records the task without reading its log first
// (actors.SubmitTask.New); with one that can, every session does, on any bus.
func (n *Node) submitNew(ctx context.Context, env messages.Envelope, task *messages.TaskSubmitted, newID bool) (string, error) {
	if n.tracing.on() {
		var end func()
		env, end = n.tracing.stamp(ctx, env)
		defer end()
		task = nil // the stamp may have changed the payload
	}
	if n.bus != nil && !n.routerRunning() {
		// The in-process bus drops what is published before the tasks handler
		// subscribed: a task that arrives while the node starts (HTTP may listen
		// first) waits for the router instead of being lost.
		wait := time.NewTimer(n.cfg.SubmitTimeout)
		defer wait.Stop()
		select {
		case <-n.router.Running():
		case <-wait.C:
			return "", fmt.Errorf("node: task %s for session %s: the node did not start within %s (SubmitTimeout)", env.ID, env.SessionID, n.cfg.SubmitTimeout)
		case <-ctx.Done():
			return "", fmt.Errorf("node: task %s for session %s: waiting for the node to start: %w", env.ID, env.SessionID, ctx.Err())
		case <-n.stopping:
			return "", fmt.Errorf("node: task %s for session %s: the node is closing", env.ID, env.SessionID)
		}
	}
	if n.bus != nil {
		return n.deliverTask(ctx, env, task, newID)
	}
	if err := n.busReachable(ctx); err != nil {
		return "", fmt.Errorf("node: publish task: %w", err)
	}
	b, err := messages.Marshal(env)
	if err != nil {
		return "", err
	}
	msg := message.NewMessage(env.ID, b)
	if len(b) > effectMessageMax {
		if msg, err = n.taskRef(ctx, env, b); err != nil {
			return "", fmt.Errorf("node: task %s for session %s: %w", env.ID, env.SessionID, err)
		}
	}
	msg.Metadata.Set(messages.MetaSessionID, env.SessionID)
	msg.Metadata.Set(messages.MetaType, string(env.Type))
	if n.tracing.on() {
		telemetry.Inject(taskContext(ctx, env), msg.Metadata)
	}
	msg.SetContext(ctx)
	if err := n.pub.Publish(messages.TopicTasks, msg); err != nil {
		return "", fmt.Errorf("node: publish task: %w", err)
	}
	return env.SessionID, nil
}

// routerRunning reports whether the router runs already.
func (n *Node) routerRunning() bool {
	select {
	case <-n.router.Running():
		return true
	default:
		return false
	}
}

// deliverTask hands an admitted task straight to its session, on the embedded bus:
// in one process the bus would only copy, encode and decode it on the way. It
// returns once the session recorded the task, as submit says. Tasks published on the
// embedded bus's tasks topic by others still go through the router (handleTask).
func (n *Node) deliverTask(ctx context.Context, env messages.Envelope, task *messages.TaskSubmitted, newID bool) (string, error) {
	if err := n.owner.refusal(); err != nil {
		// Another node took the log: the task is that node's to run.
		return "", fmt.Errorf("node: task %s for session %s: the task was not recorded: %w", env.ID, env.SessionID, err)
	}
	timeout := n.submits.Context() // SubmitTimeout, give or take a sixteenth
	if err := n.outage.admit(timeout); err != nil {
		// The log cannot write (a full disk, ClickHouse down or refusing writes):
		// the task is refused before its session hears of it. Handed on, it would
		// wait in the session behind a write retried in place (ClickHouse's writer
		// retries an outage on its own; only a full SQLite log refuses a new task's
		// write at once), its client would be told after SubmitTimeout that it may
		// still be recorded, and it would be recorded and run once the log came
		// back: a client that sent it again without an Idempotency-Key ran it twice.
		return "", fmt.Errorf("node: task %s for session %s: %w: %w", env.ID, env.SessionID, errLogCannotWrite, err)
	}
	done := make(chan error, 1)
	n.system.Root.Send(n.host, &actors.SubmitTask{Envelope: env, Task: task, Done: done, New: newID})
	tries := 1
	for {
		select {
		case err := <-done:
			if errors.Is(err, actors.ErrNotOwner) && tries < maxDeliveries {
				// This node owns every session: the task met the session's actor as
				// it stopped (passivated, or given up by its supervisor), which
				// recorded nothing of it. The host starts the session again for the
				// next try (a task it recorded after all is recognized by its ID).
				tries++
				n.system.Root.Send(n.host, &actors.SubmitTask{Envelope: env, Done: done})
				continue
			}
			if err != nil {
				return "", fmt.Errorf("node: %w", err)
			}
			// The same task read from the tasks topic is skipped as a redelivery.
			n.dedupe.handled(tasksHandler, env.ID)
			return env.SessionID, nil
		case <-ctx.Done():
			return "", fmt.Errorf("node: task %s for session %s: waiting for the session to record it: %w", env.ID, env.SessionID, ctx.Err())
		case <-timeout.Done():
			// The task waits in the session's mailbox, behind a step or a write
			// the session retries in place: it may still be recorded and run.
			return "", fmt.Errorf("node: task %s for session %s: not recorded within %s (SubmitTimeout): the session is busy, or retries a write the event log refused, and may still record it: send it again with the same Idempotency-Key or task_id, and it runs once",
				env.ID, env.SessionID, n.cfg.SubmitTimeout)
		case <-n.stopping:
			return "", fmt.Errorf("node: task %s for session %s: the node is closing", env.ID, env.SessionID)
		}
	}
}

// errLogCannotWrite is the refusal of a new task while the event log cannot write.
var errLogCannotWrite = errors.New("the task was not recorded: the event log cannot write, so new tasks are refused until it can (GET /healthz answers 200 again): send it again then")

// maxDeliveries bounds the times deliverTask hands one task to the session host.
const maxDeliveries = 3

// Cancel stops a session's running task. On a sharded node the cancellation goes to
// the session's owner over the bus, and Cancel returns once it is published.
func (n *Node) Cancel(ctx context.Context, sessionID, reason string) error {
	return n.cancelTask(ctx, sessionID, "", reason)
}

// cancelTask is Cancel of the task taskID (its name, as Status gives it), which
// the caller found running; when taskID is empty, of the task the session's log
// shows running now. The cancellation names it (messages.CancelRequest.TaskID):
// handled after that task ended, it cancels nothing, not the task that runs next
// (a request sent again, many sent at once, one read again from the bus).
func (n *Node) cancelTask(ctx context.Context, sessionID, taskID, reason string) error {
	c, err := n.ingress.AdmitCancel(sessionID, reason)
	if err != nil {
		return err
	}
	c.TaskID = taskID
	if n.sharded() {
		return n.publishCancel(ctx, c)
	}
	if c.TaskID == "" {
		// Best effort: a session whose log shows no task running yet (a child's
		// task on its way) or cannot be read is cancelled as before, whatever runs.
		if st, ok, err := n.Status(ctx, sessionID); err == nil && ok && st.Status == messages.StatusRunning {
			c.TaskID = st.TaskID
		}
	}
	return n.cancelHere(c)
}

// cancelSubmitted is cancelTask of a task this node submitted (task, its ID): on
// a sharded node the cancellation is published whatever the session's log shows,
// since the task, published before it on the session's partition, may not be
// recorded yet (publishCancel would find no task running and send nothing, and
// the task would run with nobody to cancel it); its owner reads the cancellation
// after the task, and one that finds the task ended cancels nothing.
func (n *Node) cancelSubmitted(ctx context.Context, sessionID, task, reason string) error {
	if !n.sharded() {
		return n.cancelTask(ctx, sessionID, task, reason)
	}
	c, err := n.namedCancel(sessionID, task, reason)
	if err != nil {
		return err
	}
	return n.sendCancel(ctx, c)
}

// namedCancel admits a cancellation of task (its ID) in sessionID, for
// cancelSubmitted and cancelFollowed, which name the task they cancel.
func (n *Node) namedCancel(sessionID, task, reason string) (messages.CancelRequest, error) {
	c, err := n.ingress.AdmitCancel(sessionID, reason)
	if err != nil {
		return c, err
	}
	c.TaskID = task
	return c, nil
}

// cancelNamed is cancelTask of the task a client names (its task_id or its ID),
// for POST /v1/sessions/{id}/cancel with a body. On a sharded node, which cannot
// know every task its session's owner holds, it refuses what the session's log
// shows the task cannot be cancelled (cancelRefused: it ended) and otherwise
// publishes the cancellation naming it, as cancelSubmitted does, whatever the
// log shows running: a task published and not yet recorded (a client that
// cancels just after its 202, the first task of a new session among them) is
// cancelled when its owner reads the cancellation after it, and one its owner
// does not hold (an unknown ID, another session's task) is dropped there.
func (n *Node) cancelNamed(ctx context.Context, sessionID, task, reason string) error {
	if !n.sharded() {
		return n.cancelTask(ctx, sessionID, task, reason)
	}
	c, err := n.admittedCancel(ctx, sessionID, task, reason)
	if err != nil {
		return err
	}
	return n.sendCancel(ctx, c)
}

// admittedCancel is the cancellation naming task that a sharded node publishes
// (namedCancel), unless the session's log shows the task cannot be cancelled
// (cancelRefused).
func (n *Node) admittedCancel(ctx context.Context, sessionID, task, reason string) (messages.CancelRequest, error) {
	c, err := n.namedCancel(sessionID, task, reason)
	if err != nil {
		return c, err
	}
	return c, n.cancelRefused(ctx, sessionID, task)
}

// cancelRefused says, from the session's log, whether a cancellation of the task
// named name (its task_id or ID) would cancel nothing: ErrNoRunningTask when the
// task ended (actors.ErrTaskCancelled, one, when it ended cancelled), or waits its turn under decision rules older than 10, where it is
// not cancelled (SessionState.QueuedTask); nil when it runs, waits its turn, or
// is not in the log (yet).
func (n *Node) cancelRefused(ctx context.Context, sessionID, name string) error {
	var status, task string
	var waits bool
	var ended error
	_, err := n.folds.with(ctx, n.log, sessionID, func(st *actors.SessionState) error {
		id, ok := st.TaskNamed(name)
		if !ok {
			return nil
		}
		task = id
		status, _, _, _ = st.Task(id)
		waits = status == messages.StatusRunning && st.Active() != id && st.QueuedTask(id) == ""
		ended = st.CancelledTask(id)
		return nil
	})
	switch {
	case err != nil && !errors.Is(err, ErrUnknownSession):
		return err
	case errors.Is(ended, actors.ErrTaskCancelled):
		return ended
	case status == messages.StatusCompleted || status == messages.StatusFailed:
		return fmt.Errorf("%w: task %s %s", actors.ErrNoRunningTask, task, status)
	case waits:
		return fmt.Errorf("%w: task %s waits its turn, recorded under decision rules older than 10, which do not end a waiting task", actors.ErrNoRunningTask, task)
	}
	return nil
}

// maxCancelFollow bounds how long cancelFollowed follows the session's log for
// the end of the task it cancelled (at most Config.SubmitTimeout): an A2A
// client's tasks/cancel waits that long for its answer.
const maxCancelFollow = 10 * time.Second

// errEndNotRecorded is cancelFollowed's answer when the session's owner recorded
// no end of the task in time: the cancellation was sent, and may still end it.
var errEndNotRecorded = errors.New("node: the cancellation was sent to the session's owner, which has not recorded the task's end yet")

// cancelFollowed is cancelTask of task (its ID) that answers what became of the
// task: on a sharded node, where the cancellation goes to the session's owner
// over the bus, it follows the session's log for the task's end (up to
// SubmitTimeout, at most maxCancelFollow). It returns nil when the task ended
// cancelled; ErrNoRunningTask when it had ended, or ended otherwise (completed,
// failed at its deadline) before the cancellation reached its owner, or waits
// its turn under decision rules older than 10, where it is not cancelled
// (SessionState.QueuedTask); errEndNotRecorded when no end was recorded in time.
// A task the log does not hold yet (published, not recorded) is cancelled as
// cancelSubmitted does: the cancellation follows it on its partition.
func (n *Node) cancelFollowed(ctx context.Context, sessionID, task, reason string) error {
	if !n.sharded() {
		return n.cancelTask(ctx, sessionID, task, reason)
	}
	c, err := n.admittedCancel(ctx, sessionID, task, reason)
	if err != nil {
		return err
	}
	live, stop := n.Watch(sessionID)
	defer stop()
	within := min(n.cfg.SubmitTimeout, maxCancelFollow)
	follow, done := context.WithTimeout(ctx, within)
	defer done()
	if err := n.sendCancel(follow, c); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := n.taskResult(follow, sessionID, task)
		switch {
		case err != nil:
		case res.Status == messages.StatusFailed && res.Reason == messages.ReasonCancelled:
			return nil
		case res.Status == messages.StatusCompleted || res.Status == messages.StatusFailed:
			return fmt.Errorf("%w: task %s %s before the cancellation reached it", actors.ErrNoRunningTask, task, res.Status)
		}
		select {
		case <-follow.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%w (task %s, within %s)", errEndNotRecorded, task, within)
		case <-n.stopping:
			return fmt.Errorf("%w (task %s): the node is stopping", errEndNotRecorded, task)
		case _, ok := <-live:
			if !ok {
				live = nil // fell behind: the ticker reads the log
			}
		case <-tick.C:
		}
	}
}

// cancelHere cancels a session's running task on this node, for Cancel and for a
// CancelRequest read from the tasks topic (handleCancel).
func (n *Node) cancelHere(c messages.CancelRequest) error {
	res, err := n.system.Root.RequestFuture(n.host, &actors.CancelTask{SessionID: c.SessionID, TaskID: c.TaskID, Reason: c.Reason}, n.cfg.SubmitTimeout).Result()
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

// Bus returns the node's publisher and subscriber (the embedded bus).
// It is nil when the node runs on a bus given in Config.Bus.
func (n *Node) Bus() *EmbeddedBus { return n.bus }

// Publisher returns the publisher of the node's bus.
func (n *Node) Publisher() message.Publisher { return n.pub }

// Watch subscribes to a session's live events. The channel closes when cancel is
// called or when the subscriber fell behind (read the log from the last seq seen).
// Its first events may be some the log held already as it subscribed (a session
// hands each batch to the node's watchers just after the log has it): a reader that
// read the log up to a seq skips the events at or below it, as the SSE stream does.
func (n *Node) Watch(sessionID string) (<-chan messages.Envelope, func()) {
	return n.hub.subscribe(sessionID)
}

// CloseStreams ends every live SSE stream; an HTTP server calls it when it shuts down.
func (n *Node) CloseStreams() {
	n.streamsOnce.Do(func() { close(n.streamsDone) })
}

// Close stops the node: ingress first, the router's handlers of new work (tasks,
// and the effects a node performs for others, once those in flight answered and
// their replies were published, up to Config.HandoffGrace: call Close before
// canceling Run's context: the router then finishes subscribing a handler it is
// starting and stops it, where a canceled context would leave that handler waited
// for until the close timeout), then the session actors, drained as a revocation of a sharded node's
// partitions drains them (closeSessions): each issues no more effects, and the model
// and tool calls it has in flight get up to Config.HandoffGrace to answer, their
// results recorded, so that the node started again, or the sessions' next owners, do
// not perform them again (the answers of calls performed by other nodes come through
// the router's replies handler, which runs until the sessions drained); then each is
// stopped once it finished the message it is handling, so nothing is half-written;
// unfinished tasks stay resumable from the log. Close waits for them, and then for
// the memory namespaces' actors, up to Config.StopTimeout in all. Then the rest of
// the router, the effects still running (a call that outlived the grace: their
// contexts are cancelled, a model's HTTP request is closed, a tool sees ctx.Done();
// nobody records their end, so the sessions' next owners issue them again, with
// their keys), the bus and the log. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		close(n.stopping)
		n.CloseStreams()
		// A router that never ran has nothing to drain (and its Close would wait out
		// its timeout for handlers that never started).
		stoppedAdmitting := false // the rest of the router runs on
		if n.router != nil && n.ran.Load() {
			if stoppedAdmitting = n.stopAdmitting(); !stoppedAdmitting {
				errs = append(errs, n.router.Close())
			}
		}
		// The rest of the router (the replies, the cancellations of the effects
		// this node performs) once nothing waits for a reply any more.
		closeRest := sync.OnceFunc(func() {
			if stoppedAdmitting {
				errs = append(errs, n.router.Close())
			}
		})
		// The node's actors are waited for within StopTimeout as a whole.
		stopCtx, stopCancel := context.WithTimeout(context.Background(), n.cfg.StopTimeout)
		defer stopCancel()
		if n.system != nil && n.host != nil {
			n.closeSessions(stopCtx)
			close(n.sessionsStop)
			// Not PoisonFuture: its future gives up after protoactor's fixed
			// 10 s, and the bus and the log were closed under a session still
			// handling a message (an append attempt to a slow log, which
			// IOTimeout bounds, the fold of a long history).
			if err := actors.AwaitStop(stopCtx, n.system, n.host, n.system.Root.Poison); err != nil {
				n.cfg.Logger.Warn("node closing with session actors still handling a message past StopTimeout; closing the bus and the log under them",
					"node", n.cfg.NodeID, "stop_timeout", n.cfg.StopTimeout, "err", err)
			}
			n.hostStopped.Store(true)
		}
		// The consolidations run for commands, cut off as the node began to stop,
		// answer so before the consolidator and the memories they use close. Waited
		// for after the sessions: a run stuck in a model call that ignores its
		// context would otherwise spend StopTimeout before the sessions drain, and
		// they would go on issuing effects meanwhile, then get no grace at all.
		if err := n.aside.close(stopCtx); err != nil {
			n.cfg.Logger.Warn("node closing with consolidations still running; closing the memories under them", "node", n.cfg.NodeID, "err", err)
		}
		if n.system != nil {
			// The consolidator's actors run on the node's system: stopped before it
			// shuts down, each finishes its message (a run cut short would be
			// resumed at the next start, but need not be).
			if n.consolidation != nil {
				errs = append(errs, n.consolidation.Close())
			}
			if n.memHost != nil {
				// Before the memories they work on are closed, the namespaces'
				// actors finish their requests.
				if err := n.memHost.Stop(stopCtx); err != nil {
					n.cfg.Logger.Warn("node closing with memory namespace actors still handling a request past StopTimeout; closing the memories under them",
						"node", n.cfg.NodeID, "stop_timeout", n.cfg.StopTimeout, "err", err)
				}
			}
			closeRest() // before the actors its handlers deliver replies to shut down
			n.system.Shutdown()
		}
		closeRest()
		// The sessions are stopped: the calls they waited on, and those served for
		// other nodes, are cancelled (a model's HTTP request is closed, a tool sees
		// its context end), and nobody records their end: the sessions' next owners
		// issue them again.
		// A sharded node whose partitions were not revoked yet (the bus's Revoked
		// comes after the host stopped, or never) hands them over here: its sessions
		// are stopped, the outbox publishes what they handed it, and the log records
		// the clean release before this member leaves the group (Revoked waits).
		n.closeHandOver()
		// The subscribers of the handlers stopAdmitting stopped close once the
		// handover is recorded: a sharded node's Kafka subscriber, as it closes,
		// waits for its partitions' Revoked, which waits for the handover.
		if stoppedAdmitting {
			errs = append(errs, n.closeStopped())
		}
		// The sessions are stopped: the A2A push notifications stop too, before
		// the log closes (an end posted meanwhile is recorded as posted). A
		// notification posted after the node stopped would land after those of
		// the node that follows the task next: a webhook would hear a task that
		// ended run again.
		n.a2aOnce.Do(func() {})
		if n.a2aServer != nil {
			_ = n.a2aServer.Close()
		}
		if n.afterTask != nil {
			n.afterTask.close(5 * time.Second)
		}
		if n.parentEnds != nil {
			n.parentEnds.close(5 * time.Second)
		}
		if n.local != nil {
			_ = n.local.Close()
		}
		if n.remote != nil {
			_ = n.remote.Close()
		}
		// The sessions are stopped: their open spans end, and go to the exporter. A
		// collector down or slow loses spans, which is said, but the node's stop
		// went well: not its error.
		if err := n.tracing.close(); err != nil {
			n.cfg.Logger.Warn("traces: not every span was exported as the node stopped", "err", err)
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
		if n.memories != nil {
			errs = append(errs, n.memories.Close())
		}
		if n.ownVectors != nil {
			errs = append(errs, n.ownVectors.Close())
		}
		if n.knowledge != nil {
			errs = append(errs, n.knowledge.Close())
		}
		if n.kbVectors != nil {
			errs = append(errs, n.kbVectors.Close())
		}
		if n.ownLog {
			errs = append(errs, n.log.Close())
		}
		// Nothing the bus left running logs past Close.
		n.busLogs.close()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// closeSessions drains the node's sessions as a revocation of its partitions does
// (drainSessions): each issues no more effects, the calls it has in flight get up
// to Config.HandoffGrace (within the StopTimeout of ctx) to answer and are
// recorded, and it is stopped. Stopped at once, a session left the calls it had
// issued answering nobody: a tool that had done its work was performed again,
// with the same key, where the session ran next. A call still running at the
// grace is given up, as a kill would leave it (the node's effects are cancelled
// next), and issued again there. A sharded node's generation ends first, so that
// an assignment being run starts none of its sessions again (runAssigned).
func (n *Node) closeSessions(ctx context.Context) {
	if n.sharded() {
		n.own.mu.Lock()
		n.own.generation++
		n.own.mu.Unlock()
	}
	deadline, _ := ctx.Deadline()
	start := time.Now()
	d, err := n.drainSessions(deadline)
	switch {
	case err != nil:
		n.cfg.Logger.Warn("node closing without draining its sessions; stopping them", "node", n.cfg.NodeID, "err", err)
	case d.stopping > 0:
		n.cfg.Logger.Warn("node closing with session actors still handling a message past StopTimeout; closing the bus and the log under them",
			"node", n.cfg.NodeID, "stop_timeout", n.cfg.StopTimeout, "sessions", d.stopping)
	case d.sessions > 0:
		n.cfg.Logger.Info("node closing; sessions drained", "node", n.cfg.NodeID, "sessions", d.sessions,
			"effects_abandoned_sessions", d.late, "took", time.Since(start).Round(time.Millisecond))
	}
}

// DataDir returns the absolute data directory of an embedded node.
func (n *Node) DataDir() string {
	abs, err := filepath.Abs(n.cfg.DataDir)
	if err != nil {
		return n.cfg.DataDir
	}
	return abs
}
