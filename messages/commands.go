package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Internal topics of a cluster. Session actors on one node ask nodes with the tools or
// models role to perform effects through them; the answer comes back on TopicReplies
// to the node that asked (metadata MetaReplyNode), correlated by the request's message
// ID (metadata MetaCorrelationID) and matched to the session by the effect's Key.
const (
	// TopicToolRequests carries EffectRequests with a Tool, keyed by session ID.
	TopicToolRequests = "troupe.tool.requests"
	// TopicModelRequests carries EffectRequests with a Model call, keyed by session ID.
	TopicModelRequests = "troupe.model.requests"
	// TopicReplies carries EffectReplies, keyed by session ID.
	TopicReplies = "troupe.replies"
	// TopicEffectCancels carries EffectCancels, keyed by session ID. Every node that
	// performs effects for others reads all of it (no consumer group): the one
	// performing the effect cancels it.
	TopicEffectCancels = "troupe.effect.cancels"
)

// Metadata keys of internal messages.
const (
	// MetaReplyNode names the node an EffectReply is for.
	MetaReplyNode = "reply_node"
	// MetaCorrelationID is set on a reply to the ID of the message it answers.
	MetaCorrelationID = "correlation_id"
	// TypeCancelRequested marks (in MetaType) a CancelRequest on TopicTasks.
	TypeCancelRequested = "task.cancel"
	// TypeMemoryCommand marks (in MetaType) a MemoryCommand on TopicTasks, and
	// TypeMemoryReply a MemoryReply on TopicReplies.
	TypeMemoryCommand = "memory.command"
	TypeMemoryReply   = "memory.reply"
)

// CommandVersion is the schema version of the commands in this file (EffectRequest,
// EffectReply, EffectCancel, CancelRequest). They are never stored as events, but nodes of two
// builds talk through them during a rolling upgrade: a node refuses a newer version
// with ErrFutureVersion instead of misreading it.
const CommandVersion = 1

// EffectRequest asks for one effect (a tool call or a model call) on behalf of a
// session hosted on another node. Key is the effect's idempotency key: a request
// delivered twice, or issued again by the session's next owner after a crash, carries
// the same Key, and tools perform their side effect once per Key.
type EffectRequest struct {
	V          int       `json:"v"`
	SessionID  string    `json:"session_id"`
	Key        EffectKey `json:"key"`
	ReplyTopic string    `json:"reply_topic"`
	ReplyNode  string    `json:"reply_node"`
	// Exactly one of Tool and Model is set.
	Tool  *ToolCallRequested `json:"tool,omitempty"`
	Model *ModelCall         `json:"model,omitempty"`
	// Agent names the agent of the session's task a tool call is made for
	// (tools.Call.Agent; empty: the node's own); a model call says it in Model.Agent.
	Agent string `json:"agent,omitempty"`
	// Outward is the name of the effect outside the log (EffectKey.Outward), which
	// a tool gives a service that dedupes by it (tools.Call.Outward): unique across
	// event logs, where Key is unique only within one. Empty in a request of an
	// older build: the tool falls back to Key.
	Outward string `json:"outward,omitempty"`
	// Stream asks the node performing a model call to stream it and publish its
	// increments on TopicDeltas (DeltaBatch): the session's owner sets it while the
	// session has a watcher of deltas, on its node or another (DeltaWatch).
	Stream bool `json:"stream,omitempty"`
	// Stored, when set, says that this message is a reference: the request, whole, was
	// too large for one bus message and is the EffectStored event of that stream
	// of the log (EffectStream). A reference carries only V, SessionID, Key,
	// ReplyTopic, ReplyNode and Stored.
	Stored string `json:"stored,omitempty"`
}

// ModelCall is the model request of an EffectRequest: the conversation and tools the
// session's agent sends, and on whose behalf (for quotas, prices and caches).
type ModelCall struct {
	Step     int           `json:"step"`
	Messages []ChatMessage `json:"messages"`
	Tools    []ToolSpec    `json:"tools,omitempty"`
	Agent    string        `json:"agent,omitempty"`
	Team     string        `json:"team,omitempty"`
	// ScopeKey names the API key or tenant billed (a name, never the secret).
	ScopeKey string `json:"scope_key,omitempty"`
	NoCache  bool   `json:"no_cache,omitempty"`
	// Protocol is llm.Request.Protocol ("react" forces the text protocol).
	Protocol string `json:"protocol,omitempty"`
	// Models is llm.Request.Models: the names of the agent's own chain of models,
	// first to last fallback; empty for the node's.
	Models []string `json:"models,omitempty"`
	// Purpose is llm.Request.Purpose (a paradigm's "critique", …; empty for a step
	// of the loop).
	Purpose string `json:"purpose,omitempty"`
}

// EffectReply answers an EffectRequest. Output is a tool's result; Model, Message,
// Usage and Cached a model's answer; Error says the effect failed for good.
type EffectReply struct {
	V         int          `json:"v"`
	SessionID string       `json:"session_id"`
	Key       EffectKey    `json:"key"`
	Output    string       `json:"output,omitempty"`
	Model     string       `json:"model,omitempty"`
	Message   *ChatMessage `json:"message,omitempty"`
	Usage     Usage        `json:"usage"`
	Cached    bool         `json:"cached,omitempty"`
	Error     string       `json:"error,omitempty"`
	LatencyUS int64        `json:"latency_us"`
	// FinishReason is a model's llm.Response.FinishReason: why it stopped, when
	// its answer is not whole (cut at the output limit, filtered).
	FinishReason string `json:"finish_reason,omitempty"`
	// Stored, when set, says that this message is a reference, as in EffectRequest: the
	// reply, whole, is the EffectStored event of that stream of the log.
	Stored string `json:"stored,omitempty"`
}

// EffectCancel asks the node performing an effect for another node's session to
// cancel it: the call's context is cancelled (a model's HTTP request is closed, a tool
// sees ctx.Done()). The session answered the effect itself and dropped its reply;
// a node that reads the cancellation before the request answers the request cancelled.
type EffectCancel struct {
	V         int       `json:"v"`
	SessionID string    `json:"session_id"`
	Key       EffectKey `json:"key"`
}

// CancelRequest asks the node that owns a session to cancel its running task. It
// travels on TopicTasks (MetaType TypeCancelRequested), so it reaches the owner in
// order with the session's tasks. TaskID, when given, is the task it cancels (its
// task_id, or the ID of its task.submitted event): a request read again (the bus
// delivers at least once) once that task ended cancels nothing, where one without
// it cancels whichever task runs then.
type CancelRequest struct {
	V         int    `json:"v"`
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// MemoryCommand asks the node that owns a memory namespace to run one operation on
// it. A namespace is owned like a session: SessionID is its stream
// ("memory/<namespace>"), the command travels on TopicTasks keyed by it, so it
// reaches the owner of the stream's partition, in order with the namespace's other
// commands. Key makes a write idempotent: a command delivered twice, or sent again
// after a timeout, changes the namespace once. The answer is a MemoryReply on
// ReplyTopic for ReplyNode, with the command's ID.
//
// A knowledge base (package knowledge) is owned the same way: a command whose
// Action starts with "kb_" (kb_add, kb_remove) addresses knowledge base Namespace,
// SessionID its stream "kb/<name>". So is an agent's notes (package tools/notes):
// a command whose Action is "notes" makes a change to the notes of agent
// Namespace, SessionID their stream "notes/<agent>".
type MemoryCommand struct {
	V         int    `json:"v"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Namespace string `json:"namespace"`
	// Action names the operation (add, search, history, tool); Args are its
	// arguments, as the operation's JSON.
	Action     string          `json:"action"`
	Key        string          `json:"key,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	ReplyTopic string          `json:"reply_topic"`
	ReplyNode  string          `json:"reply_node"`
}

// MemoryReply answers a MemoryCommand: Result on success, else Error with Kind
// ("invalid" for a bad request, "not_found" for an unknown memory, "key_reused" for
// an add under a key applied to other memories, "" otherwise).
type MemoryReply struct {
	V      int             `json:"v"`
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Kind   string          `json:"kind,omitempty"`
}

func (r *MemoryCommand) stamp() { r.V = CommandVersion }
func (r *MemoryReply) stamp()   { r.V = CommandVersion }

// DecodeMemoryCommand decodes and validates a MemoryCommand.
func DecodeMemoryCommand(b []byte) (MemoryCommand, error) {
	var c MemoryCommand
	if err := decodeCommand(b, &c, &c.V); err != nil {
		return c, err
	}
	switch {
	case c.ID == "" || c.Namespace == "" || c.Action == "":
		return c, fmt.Errorf("%w: memory command without id, namespace or action", ErrCorrupt)
	case c.SessionID != "memory/"+c.Namespace && !(strings.HasPrefix(c.Action, "kb_") && c.SessionID == "kb/"+c.Namespace) &&
		!(c.Action == "notes" && c.SessionID == "notes/"+c.Namespace):
		return c, fmt.Errorf("%w: memory command %s for namespace %s keyed %s", ErrCorrupt, QuoteHead(c.ID), QuoteHead(c.Namespace), QuoteHead(c.SessionID))
	case c.ReplyTopic == "" || c.ReplyNode == "":
		return c, fmt.Errorf("%w: memory command %s without reply_topic or reply_node", ErrCorrupt, c.ID)
	}
	return c, nil
}

// DecodeMemoryReply decodes and validates a MemoryReply.
func DecodeMemoryReply(b []byte) (MemoryReply, error) {
	var r MemoryReply
	if err := decodeCommand(b, &r, &r.V); err != nil {
		return r, err
	}
	if r.ID == "" {
		return r, fmt.Errorf("%w: memory reply without id", ErrCorrupt)
	}
	return r, nil
}

// Command is one of the commands in this file: *EffectRequest, *EffectReply,
// *EffectCancel, *CancelRequest, *ApprovalAnswer, *MemoryCommand or *MemoryReply. Its method is unexported: no other type is one.
type Command interface {
	// stamp sets the command's version to CommandVersion.
	stamp()
}

func (r *EffectRequest) stamp() { r.V = CommandVersion }
func (r *EffectReply) stamp()   { r.V = CommandVersion }
func (r *EffectCancel) stamp()  { r.V = CommandVersion }
func (r *CancelRequest) stamp() { r.V = CommandVersion }

// EncodeCommand encodes a command, stamping the current CommandVersion on it.
func EncodeCommand(c Command) ([]byte, error) {
	c.stamp()
	return json.Marshal(c)
}

// DecodeEffectRequest decodes and validates an EffectRequest.
func DecodeEffectRequest(b []byte) (EffectRequest, error) {
	var r EffectRequest
	if err := decodeCommand(b, &r, &r.V); err != nil {
		return r, err
	}
	switch {
	case r.SessionID == "" || r.Key.IsZero():
		return r, fmt.Errorf("%w: effect request without session_id or key", ErrCorrupt)
	case r.Key.SessionID != r.SessionID:
		return r, fmt.Errorf("%w: effect request %s for session %s: the key is another session's", ErrCorrupt, r.Key, r.SessionID)
	case r.ReplyTopic == "" || r.ReplyNode == "":
		return r, fmt.Errorf("%w: effect request %s without reply_topic or reply_node", ErrCorrupt, r.Key)
	case r.Stored != "":
		if r.Stored != EffectStream(BusStoredRequest, r.Key) || r.Tool != nil || r.Model != nil {
			return r, fmt.Errorf("%w: effect request %s: a reference must name its own stream (%s) and carry no call", ErrCorrupt, r.Key, EffectStream(BusStoredRequest, r.Key))
		}
		return r, nil
	case (r.Tool == nil) == (r.Model == nil):
		return r, fmt.Errorf("%w: effect request %s must name exactly one of tool and model", ErrCorrupt, r.Key)
	case r.Tool != nil && (r.Tool.Tool == "" || r.Tool.Key != r.Key.String()):
		return r, fmt.Errorf("%w: effect request %s: tool call without a name or with another key", ErrCorrupt, r.Key)
	}
	return r, nil
}

// DecodeEffectReply decodes and validates an EffectReply.
func DecodeEffectReply(b []byte) (EffectReply, error) {
	var r EffectReply
	if err := decodeCommand(b, &r, &r.V); err != nil {
		return r, err
	}
	if r.SessionID == "" || r.Key.IsZero() {
		return r, fmt.Errorf("%w: effect reply without session_id or key", ErrCorrupt)
	}
	if r.Key.SessionID != r.SessionID {
		return r, fmt.Errorf("%w: effect reply %s for session %s: the key is another session's", ErrCorrupt, r.Key, r.SessionID)
	}
	if r.Stored != "" && r.Stored != EffectStream(BusStoredReply, r.Key) {
		return r, fmt.Errorf("%w: effect reply %s: a reference must name its own stream (%s)", ErrCorrupt, r.Key, EffectStream(BusStoredReply, r.Key))
	}
	return r, nil
}

// DecodeEffectCancel decodes and validates an EffectCancel.
func DecodeEffectCancel(b []byte) (EffectCancel, error) {
	var c EffectCancel
	if err := decodeCommand(b, &c, &c.V); err != nil {
		return c, err
	}
	switch {
	case c.SessionID == "" || c.Key.IsZero():
		return c, fmt.Errorf("%w: effect cancel without session_id or key", ErrCorrupt)
	case c.Key.SessionID != c.SessionID:
		return c, fmt.Errorf("%w: effect cancel %s for session %s: the key is another session's", ErrCorrupt, c.Key, c.SessionID)
	}
	return c, nil
}

// DecodeCancelRequest decodes and validates a CancelRequest.
func DecodeCancelRequest(b []byte) (CancelRequest, error) {
	var r CancelRequest
	if err := decodeCommand(b, &r, &r.V); err != nil {
		return r, err
	}
	if r.SessionID == "" {
		return r, fmt.Errorf("%w: cancel request without session_id", ErrCorrupt)
	}
	return r, nil
}

func decodeCommand(b []byte, into any, version *int) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(into); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if d.More() {
		return fmt.Errorf("%w: trailing data after command", ErrCorrupt)
	}
	if *version > CommandVersion {
		return fmt.Errorf("%w: command v%d, this build reads up to v%d", ErrFutureVersion, *version, CommandVersion)
	}
	return nil
}
