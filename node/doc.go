// Package node assembles one Troupe node: the bus, the event log, the actor system
// (session host and session actors), the node's effects (the model behind the gateway
// and the tools, performed here or, for a role the node lacks, by other nodes over the
// bus), the bus router with its middleware (retry, poison topic, dedupe, panic
// recovery, metrics) that hands tasks to sessions, the live event hub, the event sink,
// and the HTTP API.
//
// Tasks enter through Submit, POST /v1/tasks or the bus topic messages.TopicTasks (an
// envelope, or the plain JSON task any Kafka client can publish); they leave as
// events in the event log, as live events on messages.TopicEvents (and SSE), and as a
// TaskResult on messages.TopicResults, which names its task (TaskResult.TaskID: the
// task_id a client gave it, else its task.submitted's ID). The tasks handler works on many tasks at once (on
// Kafka, kafka.NodeTasksInFlight per partition), but on one session's tasks and
// cancellations one at a time, in the order the bus delivered them, a failed one
// again before the next (ingest.go). Every source (Submit and the CLI, HTTP, the
// tasks topic, MCP's run_task, A2A) is a thin adapter in front of the node's Ingress
// (ingress.go), which decodes, checks and redacts tasks and cancellations in one
// place, and answers to approvals (approvals.go: POST /v1/sessions/{id}/approvals/{call},
// a task.approval message, Node.Approve; GET /v1/approvals lists what waits); Node.HTTPServer serves the API with read, write and
// idle timeouts and a bound on connections (Config.HTTP), and the web dashboard at
// /ui/ (ui.go: embedded pages over the API; GET /v1/stats, stats.go; its login for a
// session cookie, uisession.go). An embedded node (the default) runs on
// Watermill's in-process GoChannel (EmbeddedBus, which publishes nothing to a topic
// nobody subscribes to) and a SQLite log in its data directory; there Submit hands its
// task to the session host directly, and the session actors hand their events, once
// durable, to the live hub (Watch, SSE) directly, where the bus would only copy, encode
// and decode them. Config.Bus puts it on Kafka (package kafka) and Config.Log on
// ClickHouse.
//
// When the OTEL_* environment names an exporter (or Config.Traces gives a provider),
// the node traces (tracing.go, package telemetry): a span per task, step, model call
// and tool call, made from the sessions' durable events, and one trace per task
// across the cluster (the task records the traceparent it was submitted under;
// effect requests carry theirs in their bus message's metadata). Off, it costs nothing.
//
// While a session has a watcher of deltas (WatchDeltas: the SSE stream, node run on a
// terminal, any protocol that streams a session), its model calls stream and the hub
// hands their increments (model.delta, deltas.go) to those watchers: live only, never
// logged nor on messages.TopicEvents, redacted, and dropped for a watcher that reads
// slowly. In a cluster a watcher on another node than the session's owner is
// announced to it (messages.DeltaWatch), and the node performing a call publishes its
// increments in batches on messages.TopicDeltas for the others (deltas_cluster.go).
//
// In a cluster (Bus.Sharded) the nodes share one log and Kafka's consumer group on
// messages.TopicTasks spreads the sessions: Assigned resumes the unfinished sessions of
// the partitions a node gets (Config.ResumeConcurrency at a time, as a node's start
// does: each reads its log, and the log's connections are shared with the API),
// Revoked drains and stops them before the partitions move. A node that gives its
// partitions up cleanly (Revoked, or Close) records the release in the log
// (eventlog.Releasing) once its outbox published everything its sessions handed it;
// the next owner reads it in the owner records its epoch supersedes when it takes
// them (eventlog.Releasing.TakeOver, fencing.go), and republishes the
// ended sessions' latest tasks only for partitions not released so (an owner
// killed or fenced between appending and publishing), and of those only the
// sessions that ended after their owner's last publication mark: every
// Config.PublishMarkInterval, an owner records the time before which it published
// everything its sessions appended (pubmark.go).
// A session's partition is murmur2 of its ID (Bus.Partition); a task or cancellation
// read from another partition (a librdkafka client's CRC32, or a record without a
// key) is forwarded to the session's partition with its message ID, and committed
// only once the forward is acknowledged (cluster.go).
// Roles split the work: a node without the tools or models role sends those calls as
// messages.EffectRequest on messages.TopicToolRequests / TopicModelRequests, and nodes
// with the role answer on messages.TopicReplies (cluster.go), except a delegate
// call, which a session's own node performs (wiring.go, delegatesHere); a request still
// unanswered after Config.EffectReissue (a call of a tool with a longer timeout of
// its own: that timeout plus 30 s) is published again (a reply can be lost),
// and answered from the performer's kept answer or running call. Session events and
// results reach the bus through an outbox that publishes in order and in batches, in
// the background (outbox.go).
//
// Sub-agents are child sessions (delegate.go): with named agents (Config.Agents) the
// node has the delegate tool, whose performer submits the child's task through the
// ingress under an ID derived from the call's key, and waits for the child's end.
//
// A named agent may have its own models (NamedAgent.Model, Fallbacks): one more chain
// of the node's gateway (gateway.Config.Routes), which its requests name
// (llm.Request.Models). It may have its own memory namespace and skills: the memory
// and skill tools of the registry act for the agent a call is made for
// (tools.Call.Agent, carried by messages.EffectRequest.Agent), each agent's version
// built beside the default agent's (agents.go, agentTool). Its MCP servers are a view
// of the node's catalog (serverCatalog).
//
// A team (NamedAgent.Team) is a named agent whose paradigm hands its members, other
// named agents, their work with that tool: each member works in a child session.
// Its own context settings and budgets are built as an agent's (ownContext,
// ownStops); its budgets are its whole task's, its members' work included.
package node
