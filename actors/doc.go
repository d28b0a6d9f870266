// Package actors holds Troupe's actors (protoactor-go): the SessionHost that spawns and
// passivates one SessionActor per session, and the SessionActor that runs an agent as
// a state machine folded from its events; and the Effects port every effect of a
// session goes through.
//
// Messages enter as a TaskSubmitted envelope forwarded to the SessionHost (by the node's
// bus router) and as effect replies; they leave as sequenced events appended to the
// event log and published on the bus topic messages.TopicEvents, and as effect
// requests.
//
// An effect (a model call, a tool call, and every kind to come) has one request shape,
// messages.EffectRequest, keyed by its messages.EffectKey, and one reply shape,
// messages.EffectReply, from the session to the performer and back. The session hands
// requests to an Effects: LocalEffects performs them on this node (one performer per
// kind, with a concurrency bound, a queue, a timeout, and a context Cancel and Close
// end); BusEffects asks the nodes with the role over the bus; EffectsByKind splits a
// node's effects between the two. When a task ends while an effect is in flight
// (cancelled, or past its deadline), the session cancels the effect: the model's HTTP
// request is closed, the tool sees its context end.
//
// The agent's decisions (SessionState.Apply and SessionState.Decide) are pure: no clock,
// no randomness, no map-order dependence. Recovery after a panic or a killed process is
// "read the events, fold them, re-issue only effects that were requested and never
// answered, with the same idempotency key". A task's stop conditions (max steps, token
// budget, deadline, cancellation, loop detection) are judged the same way, from the
// fold (stops.go): each ends the task with a TaskFailed that names its reason.
//
// Every model request is built within the agent's context budget (Agent.Context,
// context.go) by package pipelines/context: the system prompt and tool section stay
// a byte-identical prefix, the task's input and the answer to the model's latest
// move are always sent, and of the rest of the conversation what scores best fits
// the window less the reserved output. The build's report (what was kept, dropped
// and truncated, with scores and tokens) rides on the ModelRequested it describes,
// so replay show explains each prompt and replay verify compares it.
//
// A tool chain (tools.ChainTool, in Agent.Chains) is run by the session step by step:
// each step is a tool.requested of its own, naming its chain's call, issued as an
// effect under its own key; the session records the chain's result as the call's
// tool.completed once the steps answered (chain.go). A restart mid-chain re-issues
// only the unanswered step. A call of call_tool (ToolCallTool) naming a chain is run
// the same way.
//
// An agent's paradigm (Agent.Paradigm, paradigm.go) works its tasks beyond the tool
// loop, with model and tool calls of its own purpose, folded like the loop's:
// Reflection critiques each answer of the loop and has it revised (reflection.go);
// Reflexion keeps lessons of the tasks that went wrong with the memory tool and puts
// those of similar tasks in the prompt (reflexion.go). Both judge answers with the
// verdicts of verdict.go.
// PlanExecute asks a planner for a plan, a DAG of steps checked in the fold (plan.go),
// runs its ready steps in parallel as tool calls, delegations or turns of the agent's
// own loop, re-plans after a failed step, and asks for the answer from the steps'
// results (planexec.go).
//
// A team (team.go) is an agent whose paradigm is a team's pattern (orchestrator,
// pipeline, fan_out, debate, handoff): it hands its members, other agents, their
// work with delegate calls (tool calls with a purpose, each a child session on a
// node), asks its model only for routing decisions, and records its shared state as
// team.state_updated events it decides itself, folded like everything else.
//
// A call of a tool in Agent.Approvals waits for a human (approvals.go): the session
// records approval.requested after its tool.requested and does not perform it until
// an approval.resolved is folded (ResolveApproval, or its own rejection once
// Agent.ApprovalTimeout passed, judged with the time like a deadline). Approved, it is
// performed as any call; rejected, the session records its tool.completed with the
// rejection, which the model reads. The wait is part of the fold: a restart or a
// hand-over waits still.
//
// A session actor lives while its session is in use: it passivates after IdleTimeout
// idle, or earlier when the host has more than MaxLiveSessions (least recently used
// idle sessions first, never one with a running task); its next message folds it back.
// A session started for a task reads nothing first: it claims the session, writing
// the task at seq 1 with what the agent decides after it, which the log refuses if
// the session has any event, and only then reads them (SessionActor.claim). With a
// store that claims (ClaimingStore: eventlog.Claiming, under the partition's lease
// on a sharded node) that holds for every task, a redelivered one included; with
// one that does not, only for a new task (SubmitTask.New: an ID no log holds yet)
// on a node that runs every session.
//
// Session actors' mailboxes and effect calls run on pools of long-lived goroutines
// (up to a bound, then on new ones), which keep the stacks that SQLite and
// encoding/json grow. A session folds the events it encodes itself (its decisions, and
// the answers of its effects unless redaction changed them) with the payloads they
// were encoded from, and decodes only what comes from elsewhere; the state is the
// same as a refold of the log gives (SessionState.applyEncoded says when it could
// differ, and decodes then).
//
// Supervision policies, stated per actor: session actors are restarted by the
// SessionHost (OneForOne, up to 5 restarts in 10 s, then stopped and left resumable in
// the log); the SessionHost itself is resumed after a failure, never restarted, as a
// restart would stop every session it hosts. Effects run user code in recovered
// goroutines, never on an actor's, so that a panicking tool or model becomes an error
// reply, never a crashed session.
//
// In a cluster, the SessionHost runs only the sessions its node owns (SetOwnership),
// hands them over when their partitions move, and when the node closes
// (ReleaseSessions, then Drain on each: no new effects, calls in flight answered and
// recorded), and BusEffects stands in for
// the model or the tools on a node without that role: it publishes each request, and
// the node hands it the replies; the node that serves the request performs it with its
// LocalEffects.
//
// # What is committed before an effect, and why
//
// A session appends a step's events and waits for the log to commit them before it
// acts on them. Which of those waits an effect actually needs:
//
//   - task.submitted: before the 202 (or the Kafka ack). An acknowledged task must
//     survive a crash; this is the acknowledgement.
//   - tool.requested: before the tool is called. Its seq is the call's idempotency
//     key, and recovery re-issues exactly the requested-but-unanswered calls with it;
//     a call made without its request recorded could be made again under another key
//     by the session's next incarnation.
//   - model.requested: not needed for exactly-once (a model call has no side effect,
//     and a model call lost to a crash is simply made again), and not fsynced: the
//     embedded log commits in WAL mode with synchronous=NORMAL, which fsyncs at
//     checkpoints, not per commit (sqlite.Config.SyncFull opts in). The wait for the
//     commit itself is kept for fencing: the commit is where a node that lost the
//     session's partition learns it (eventlog.ErrFenced), and a request sent before
//     it would be a model call paid for by a node that no longer owns the session
//     (TestFencedSessionStops asserts a fenced session makes none). Sending the
//     request while its batch commits would take the commit's latency off the step,
//     not its CPU; the answer would still be recorded before anything acts on it.
//   - model.responded and tool.completed: before anything acts on them (the next
//     request, a tool call the answer asks for, the task's result). An answer acted on
//     but not recorded would be paid for, or performed, a second time on recovery.
//   - task.completed / task.failed: before the result is published, so a result a
//     client saw is never taken back by a recovery.
package actors
