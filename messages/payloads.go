package messages

import "encoding/json"

// Role is the author of a chat message.
type Role string

// Chat roles, as OpenAI-compatible APIs name them.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ChatMessage is one message of a model conversation.
type ChatMessage struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a model's request to run one tool. Arguments is the model's raw text,
// which may be malformed: tools validate it and malformed input becomes an error result.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool to a model. Parameters is a JSON Schema object.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Usage counts the tokens of one model call (or of a task, summed).
type Usage struct {
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	CachedTokens     int     `json:"cached_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + o.PromptTokens,
		CompletionTokens: u.CompletionTokens + o.CompletionTokens,
		CachedTokens:     u.CachedTokens + o.CachedTokens,
		CostUSD:          u.CostUSD + o.CostUSD,
	}
}

// Tokens is the prompt and completion tokens together: what a token budget counts.
func (u Usage) Tokens() int { return u.PromptTokens + u.CompletionTokens }

// IsZero reports whether u counts nothing.
func (u Usage) IsZero() bool { return u == Usage{} }

// TaskSubmitted asks a session to run a task. It is the ingress message (HTTP, CLI,
// Kafka) and, once sequenced, the first event of a task.
type TaskSubmitted struct {
	Input string `json:"input"`
	// Agent names the agent configuration to run; empty means the node's default.
	Agent string `json:"agent,omitempty"`
	// Model overrides the agent's model; empty means the node's default.
	Model string `json:"model,omitempty"`
	// MaxSteps bounds the model calls of this task; 0 means the agent's default.
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxTokens is the task's token budget: the prompt and completion tokens of all
	// its model calls together. Once they reach it, no model call follows and the task
	// fails with ReasonTokenBudget; a reply that crosses it is still the answer when it
	// is a final one. 0 means the agent's budget (none unless its agent has one).
	MaxTokens int `json:"max_tokens,omitempty"`
	// MaxCostUSD is the task's cost budget in US dollars: the cost of its model calls
	// (Usage.CostUSD, from the gateway's price table) and its sub-agents' together.
	// Once it reaches it, no model or tool call follows and the task fails with
	// ReasonCostBudget; a final answer that crosses it is kept. 0 means the agent's
	// budget (none unless its agent has one).
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// DeadlineUS is an absolute deadline in Unix microseconds; 0 means none.
	DeadlineUS int64 `json:"deadline_us,omitempty"`
	// ReplyTopic, when set, receives the task's result.
	ReplyTopic string `json:"reply_topic,omitempty"`
	// Memory is the agent's core memory blocks (package memory, RenderBlocks) as
	// they stood when the task was submitted; the session puts it in the system
	// prompt of the task's model calls. The node's ingress sets it (replacing what
	// a client sent) when the agent has a memory tool and a block holds a value;
	// empty means none. It is recorded with the task, so a refold or a replay sees
	// the blocks the task saw; a block edited during the task shows from the next.
	Memory string `json:"memory,omitempty"`
	// Parent, on the task of a sub-agent (a child session), names the session and
	// the delegate call that started it; nil on every other task. Optional: a task
	// recorded before it existed decodes with none (the schema version stays 1).
	Parent *ParentRef `json:"parent,omitempty"`
	// Depth, on a task with no Parent, is how deep a sub-agent its session is
	// all the same: a fork of a child session (replay fork) is no child of
	// anyone, and keeps the depth of the child it was forked from (its
	// ParentRef.Depth), so that it delegates no deeper than that child could; and
	// a later task of a session that is a sub-agent, or a fork of one, is
	// recorded as deep as its session (the session stamps it).
	// The depth of a task with a Parent is its Parent's (this field is 0
	// there). Optional: 0, every other task and one recorded before it
	// existed, is a session that is no sub-agent (the schema version stays 1).
	Depth int `json:"depth,omitempty"`
	// TraceParent is the W3C traceparent of the span the task was submitted under
	// (package telemetry), when the submitting node traces: the spans of the task
	// are its children wherever the session runs, and a session resumed on another
	// node continues the same trace. Empty when tracing is off. It is an input like
	// the others, never compared by replay verification, and no decision reads it.
	TraceParent string `json:"traceparent,omitempty"`
	// TraceState is the W3C tracestate of that span (vendors' entries, which the
	// caller's traceparent came with), kept beside TraceParent so that the task's
	// spans carry it too; empty when there is none.
	TraceState string `json:"tracestate,omitempty"`
	// Rules is the version of the agent's decision rules the task runs under: how
	// its context is built, selected under the token budget and compressed, and so
	// what its prompts hold, and what it decides from the same events (a team
	// whose budget is spent stops from version 3; actors.ContextRules). The session sets it when it
	// records a new task (replacing what a client sent); a refold, a replay and a
	// fork run the task under it. Optional: 0, a task recorded before it existed,
	// means version 1, the rules of those builds (the schema version stays 1).
	Rules int `json:"rules,omitempty"`
	// TaskID is the name the client gave the task (a task body's task_id): the
	// session records a task of that name once, and its result says it
	// (TaskResult.TaskID). The event's ID is derived from it and the session, so
	// that two sessions may use one name. Empty: the task's ID is its event's.
	// Optional: a task recorded before it existed has none (the schema version
	// stays 1).
	TaskID string `json:"task_id,omitempty"`
	// ConfigDigest names the configuration of its agent the task runs under
	// (AgentConfig, from decision rules 7, actors.ContextRules): the SHA-256 of that
	// configuration as the node had it, its secrets included. The session sets it
	// when it records a new task (replacing what a client sent), and the
	// configuration itself once per log, in the stream ConfigStream(ConfigDigest)
	// (ConfigRecorded); a refold, a replay and a recovery on a node configured
	// otherwise run the task under it. Empty: a task recorded before it existed,
	// which runs under the configuration of the node that decides it (the schema
	// version stays 1).
	ConfigDigest string `json:"config_digest,omitempty"`
	// Config is the configuration ConfigDigest names, with secrets redacted, as
	// the first builds of rules 7 recorded it, with the first task of each session
	// that named its digest; it is read still, before the configuration's stream.
	// A session records none now: nil.
	Config *AgentConfig `json:"config,omitempty"`
}

// AgentConfig is what of its agent's configuration a task runs under, recorded
// with it (TaskSubmitted.Config): what its prompts open with and which model they
// go to, the tools it is offered, and which of its tool calls wait for a human's
// approval.
type AgentConfig struct {
	// SystemPrompt is the agent's system prompt, its skills' section included.
	SystemPrompt string `json:"system_prompt,omitempty"`
	// Model is the model its requests name (ModelRequested.Model); Models the
	// agent's own chain of models (empty: the node's model and fallbacks).
	Model  string   `json:"model,omitempty"`
	Models []string `json:"models,omitempty"`
	// Approvals are the tools whose calls wait for approval, sorted;
	// ApprovalTimeoutUS is how long a call waits before it is rejected (0: for ever).
	Approvals         []string `json:"approvals,omitempty"`
	ApprovalTimeoutUS int64    `json:"approval_timeout_us,omitempty"`
	// Tools are the names of the tools the agent was configured with, in their
	// order (not an MCP server's, which come and go while a node runs): a tool
	// configured since is not offered to the task.
	Tools []string `json:"tools,omitempty"`
	// Roster is what the agent's tools and paradigm say of the node's agents (from
	// decision rules 10, when it has the delegate tool): the delegate tool's list
	// and enum of sub-agents, a planner's list of the agents a step may name, in
	// the node's order. Members are a team's members as its prompts describe them
	// (their tools' names too). CriticPrompt is a reflection's critic's rubric as
	// its critiques send it. An agents file that gains an agent, or another
	// agent's description edited, changes no prompt of a task recorded before.
	// A configuration recorded without them (rules 7 to 9) renders them from the
	// node's agents, as those rules do.
	Roster       []RosterAgent `json:"roster,omitempty"`
	Members      []RosterAgent `json:"members,omitempty"`
	CriticPrompt string        `json:"critic_prompt,omitempty"`
}

// RosterAgent is another agent as an agent's prompts and tools describe it
// (AgentConfig.Roster, Members): its name, its description as configured, and,
// for a team's member, the names of its tools.
type RosterAgent struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Tools       []string `json:"tools,omitempty"`
}

// ParentRef links a child session's task to the call that delegated it: the
// parent's session, the idempotency key of its delegate call (an EffectKey's text
// form; the child's session ID and task ID are derived from it) and how deep the
// child is (1 for a child of a session that is no child itself).
type ParentRef struct {
	SessionID string `json:"session_id"`
	Key       string `json:"key"`
	Depth     int    `json:"depth"`
}

// ModelRequested records that the session asked a model for its next step.
type ModelRequested struct {
	// Key is the idempotency key of the call; a re-issued call carries the same key.
	Key   string `json:"key"`
	Model string `json:"model"`
	Step  int    `json:"step"`
	// Messages is the number of conversation messages sent.
	Messages int `json:"messages"`
	// PromptHash is a SHA-256 over the request (messages and tools), hex-encoded; replay
	// verification compares it to detect a changed prompt.
	PromptHash string   `json:"prompt_hash"`
	Tools      []string `json:"tools,omitempty"`
	// Protocol is how the tools reach the model when not natively: "react" for an
	// agent of the react paradigm (llm.ProtocolReAct); empty otherwise.
	Protocol string `json:"protocol,omitempty"`
	// Purpose names what a paradigm asked the model for beyond the agent's loop
	// ("plan", "critique", …: its own prompt, whose answer does not join the
	// conversation); empty for a step of the loop.
	Purpose string `json:"purpose,omitempty"`
	// Context reports how the request's context was built: its budget, and the
	// items kept, dropped and truncated (package pipelines/context). Nil on events
	// recorded before reports were: replay verify does not compare it then.
	Context *ContextReport `json:"context,omitempty"`
}

// ModelResponded records a model's answer. Recovery and replay never call the model
// again for a Key that has a ModelResponded.
type ModelResponded struct {
	Key       string      `json:"key"`
	Model     string      `json:"model"`
	Message   ChatMessage `json:"message"`
	Usage     Usage       `json:"usage"`
	LatencyUS int64       `json:"latency_us"`
	// Error is set when the model call failed for good (after retries).
	Error  string `json:"error,omitempty"`
	Cached bool   `json:"cached,omitempty"`
	// FinishReason says why the model stopped when its answer is not whole:
	// "length" (cut at the output token limit), "content_filter", or another word
	// of the provider's. Empty for a whole answer or a turn of tool calls.
	FinishReason string `json:"finish_reason,omitempty"`
}

// ToolCallRequested records that the session asked a tool to run.
type ToolCallRequested struct {
	// Key is the idempotency key: tools with side effects perform them once per key.
	Key       string `json:"key"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	Step      int    `json:"step"`
	// Chain, on a step of a tool chain (tools.Chain), is the key of the chain's own
	// call, the ToolCallRequested of the model's call of the chain; ChainStep names
	// the step. Both are empty on any other call.
	Chain     string `json:"chain,omitempty"`
	ChainStep string `json:"chain_step,omitempty"`
	// Purpose names what a paradigm made the call for (a plan's step, a lesson
	// stored, …): its result goes to the paradigm, not to the conversation. Empty
	// for a call the model made.
	Purpose string `json:"purpose,omitempty"`
}

// ToolCallCompleted records a tool's result or error.
type ToolCallCompleted struct {
	Key       string `json:"key"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
	LatencyUS int64  `json:"latency_us"`
	// Usage is what the call spent on models, when it ran some on the task's behalf:
	// a delegate call's sub-agent (its task's tokens and those of its own
	// sub-agents). It counts against the task's token budget (TaskSubmitted.MaxTokens)
	// but is not in the task's own Usage, which is its own model calls'. Absent for
	// a tool that runs no model, as in a log written before it existed.
	Usage Usage `json:"usage,omitzero"`
}

// TaskCompleted records a task's final answer.
type TaskCompleted struct {
	Output string `json:"output"`
	Steps  int    `json:"steps"`
	Usage  Usage  `json:"usage"`
	// SubAgentsUsage is what the task's sub-agents spent (the Usage of its
	// ToolCallCompleted events, summed): it counted against the task's token
	// budget. Absent when none ran.
	SubAgentsUsage Usage `json:"sub_agents_usage,omitzero"`
	// Note is what the agent's paradigm says of the answer, when it has something
	// to say: a reflection whose critique never passed, a lesson stored, …
	Note string `json:"note,omitempty"`
}

// Reasons a task fails.
const (
	ReasonMaxSteps   = "max_steps"
	ReasonDeadline   = "deadline"
	ReasonCancelled  = "cancelled"
	ReasonModelError = "model_error"
	// ReasonUnknownAgent: the task names an agent the session's node does not run
	// (ingress refuses such a task; a node whose agents file differs records this).
	ReasonUnknownAgent = "unknown_agent"
	// ReasonUnsupportedRules: the task was recorded under decision rules
	// (TaskSubmitted.Rules) that the node continuing it does not have: a later
	// build's, or ones it dropped.
	ReasonUnsupportedRules = "unsupported_rules"
	// ReasonTokenBudget: the task's model calls used its token budget
	// (TaskSubmitted.MaxTokens, or its agent's) without a final answer.
	ReasonTokenBudget = "token_budget"
	// ReasonCostBudget: the cost of the task's model calls (and its sub-agents')
	// reached its cost budget (TaskSubmitted.MaxCostUSD, or its agent's) without a
	// final answer.
	ReasonCostBudget = "cost_budget"
	// ReasonLoop: the task went round in circles: the model requested the same tool
	// call (same tool, same arguments) too many times, or too many steps in a row
	// brought no new information (every tool result was one seen before in the task).
	ReasonLoop = "loop_detected"
	// The reasons a team's task fails (package actors, Team).
	//
	// ReasonMemberFailed: a member's work failed (its delegate call answered with an
	// error) and the team's pattern cannot go on without it, or a member handed the
	// conversation to someone who is not a member. A team whose budget is spent
	// ends with ReasonTokenBudget or ReasonCostBudget instead (from decision rules
	// 3, actors.ContextRules), whatever its pattern's reason.
	ReasonMemberFailed = "member_failed"
	// ReasonCheckFailed: an orchestrator's worker results failed the team's check
	// after every re-dispatch the team allows.
	ReasonCheckFailed = "check_failed"
	// ReasonNoVerdict: a debate's judge accepted no proposal within its rounds.
	ReasonNoVerdict = "no_verdict"
	// ReasonHandoffCycle: a member handed the conversation to a member that already
	// had it; the chain ends instead of going round.
	ReasonHandoffCycle = "handoff_cycle"
	// ReasonMaxHandoffs: the chain of handoffs reached the team's max_handoffs.
	ReasonMaxHandoffs = "max_handoffs"
	// ReasonPlanFailed: a plan_execute task found no plan to finish it (the planner
	// gave no valid plan in its retries, or a step failed with no re-plan left).
	ReasonPlanFailed = "plan_failed"
	// ReasonOutputTruncated: the model's final answer reached its output token limit
	// and was cut there (ModelResponded.FinishReason "length"), so the task has no
	// whole answer.
	ReasonOutputTruncated = "output_truncated"
	// ReasonContentFilter: the provider's content filter stopped or withheld the
	// model's final answer (ModelResponded.FinishReason "content_filter"; from
	// decision rules 5, actors.ContextRules, also a provider's own word for it:
	// Gemini's "safety", "recitation", "blocklist", "prohibited_content", "spii",
	// "image_safety", Anthropic's "refusal", Bedrock's "guardrail_intervened",
	// "content_filtered").
	ReasonContentFilter = "content_filter"
	// ReasonAnswerUnfinished: the provider ended the model's final answer for
	// another reason than a whole answer, its output limit or its content filter
	// (ModelResponded.FinishReason such as Gemini's "malformed_function_call",
	// "language", "other", or a word no provider used before), so the task has
	// no whole answer (from decision rules 5, actors.ContextRules).
	ReasonAnswerUnfinished = "answer_unfinished"
	// ReasonEmptyAnswer: the model's final answer had no text (nothing but white
	// space) and no tool calls, so the task has no answer (from decision rules 9,
	// actors.ContextRules; older rules completed the task with "").
	ReasonEmptyAnswer = "empty_answer"
	// ReasonContextOverflow: the task's next model request did not fit the model's
	// context window, whatever was dropped or cut: the system prompt and the
	// tools' schemas (a group of tools loaded mid-task), or a tool call's
	// arguments, which are never cut (from decision rules 9, actors.ContextRules;
	// older rules sent it).
	ReasonContextOverflow = "context_overflow"
	// ReasonSessionFailed: the session's actor failed (panicked) again and again
	// on the task, and its supervisor gave up on it (a bug met at each try, or an
	// event log that refused the session's writes); the error quotes the last
	// failure. It is recorded as a cancellation is, not decided by the agent: the
	// tasks queued behind it then run.
	ReasonSessionFailed = "session_failed"
	// ReasonRejected: the node refused the task as bad before it reached its
	// session (a rule of the task broken: max_steps out of range, an unknown agent,
	// a bad deadline_ms, session_id or ID header, an input over the limit, an
	// unknown type header, a header given different values, …);
	// the error is the refusal's reason. Only a task of the tasks topic gets a
	// result so (over HTTP the refusal is a 400): on troupe.results and its
	// reply_topic, never recorded: the task never existed in its session.
	ReasonRejected = "rejected"
)

// TypeTaskRejected marks (in MetaType) the result of a task the node refused as
// bad (ReasonRejected) on TopicResults and the task's reply topic, so that a
// consumer tells it from the result of a task that ran, as TypeApprovalRefused
// marks a refused approval answer.
const TypeTaskRejected = "task.rejected"

// TaskFailed records that a task stopped without an answer.
type TaskFailed struct {
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Steps  int    `json:"steps"`
	Usage  Usage  `json:"usage"`
	// SubAgentsUsage is as TaskCompleted's.
	SubAgentsUsage Usage `json:"sub_agents_usage,omitzero"`
}

// Sections and operations of a team's state (TeamStateUpdated).
const (
	// TeamSectionGlobal is the section of the team as a whole; every other section
	// is a member's, named like it.
	TeamSectionGlobal = "global"
	// TeamOpAppend adds the value to the key's values, after those it has.
	TeamOpAppend = "append"
	// TeamOpMerge sets the key's value written by the same writer (By): it replaces
	// the values that writer wrote to the key before, and keeps those of every other
	// writer beside it. A key two writers set holds both values, each with its
	// writer: a conflict stays visible, nothing is overwritten silently.
	TeamOpMerge = "merge"
)

// TeamStateUpdated records a change to the shared state of a team's task (package
// actors, Team): the team decides it (it is not an input) from what happened — a
// member's result, a routing decision, a verdict, a handoff — and the state is the
// fold of these events, rendered into the prompts and the members' tasks that follow.
type TeamStateUpdated struct {
	// Section is TeamSectionGlobal or a member's name.
	Section string `json:"section"`
	// Op is TeamOpAppend or TeamOpMerge.
	Op    string `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value"`
	// By is who wrote it: a member's name, or "team" for the team's own decisions.
	By string `json:"by"`
}

// MessageType implements Payload.
func (*TeamStateUpdated) MessageType() Type { return TypeTeamStateUpdated }

// SessionForked records that a session began as a copy of another session's first
// AtSeq events (replay fork). It follows the copied events.
type SessionForked struct {
	ParentID string `json:"parent_id"`
	AtSeq    uint64 `json:"at_seq"`
	// ShiftUS is how far, in microseconds, the fork moved the deadlines of the
	// tasks unfinished at AtSeq and the expiries of the approvals pending there
	// in the events it copied (the time from the event at AtSeq to the fork); 0
	// for a fork that moved none, or one made before it was recorded. A fork of
	// this session at a seq before this event moves them back first.
	ShiftUS int64 `json:"shift_us,omitempty"`
}

// MessageType implements Payload.
func (*SessionForked) MessageType() Type { return TypeSessionForked }

// MessageType implements Payload.
func (*TaskSubmitted) MessageType() Type { return TypeTaskSubmitted }

// MessageType implements Payload.
func (*ModelRequested) MessageType() Type { return TypeModelRequested }

// MessageType implements Payload.
func (*ModelResponded) MessageType() Type { return TypeModelResponded }

// MessageType implements Payload.
func (*ToolCallRequested) MessageType() Type { return TypeToolCallRequested }

// MessageType implements Payload.
func (*ToolCallCompleted) MessageType() Type { return TypeToolCallCompleted }

// MessageType implements Payload.
func (*TaskCompleted) MessageType() Type { return TypeTaskCompleted }

// MessageType implements Payload.
func (*TaskFailed) MessageType() Type { return TypeTaskFailed }
