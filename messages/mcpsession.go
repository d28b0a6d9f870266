package messages

// The events of an MCP client's session with the node's MCP server (package mcp,
// over Streamable HTTP). Each session is a stream of its own, "mcp/session/<the
// session's ID>" (eventlog.MCPSessionStreamPrefix: not a session of an agent, no
// task runs there), so that what the client asked of its session outlives the node
// that served it: a node that resumes the session after a restart, or another node
// behind a load balancer, folds the stream and serves the client as before.

// MCPLevelSet records a client's logging/setLevel.
type MCPLevelSet struct {
	// Level is an MCP logging level: "debug", "info", "notice", "warning",
	// "error", "critical", "alert" or "emergency".
	Level string `json:"level"`
}

// MCPSubscribed records a client's resources/subscribe.
type MCPSubscribed struct {
	URI string `json:"uri"`
}

// MCPUnsubscribed records a client's resources/unsubscribe.
type MCPUnsubscribed struct {
	URI string `json:"uri"`
}

// MCPCallStarted records that a client's tools/call of run_task started a task,
// so that a client whose call was cut off (its connection dropped, the node
// restarted) gets the task's result when it resumes the call's stream or sends the
// call again, rather than a second run.
type MCPCallStarted struct {
	// RequestID is the JSON text of the call's JSON-RPC ID (a number or a string).
	RequestID string `json:"request_id"`
	// Stream is the ID of the call's response stream (its SSE events' IDs are
	// <Stream>_<index>); empty when the call had none (stdio, a JSON response).
	Stream string `json:"stream,omitempty"`
	// ArgsHash is the hex SHA-256 of the call's arguments: a call sent again with
	// the same ID and arguments is the same call.
	ArgsHash string `json:"args_hash"`
	// TaskSession is the session of the task the call started.
	TaskSession string `json:"task_session"`
	// TaskID is the ID of that task (its task.submitted event's): a call that
	// continues a session waits for its own task, not the session's last. Empty in
	// records written before it was kept.
	TaskID string `json:"task_id,omitempty"`
	// ProgressToken is the JSON text of the call's progressToken (a string or a
	// number), empty when it asked for no progress: a node that resumes the
	// call's stream goes on telling its progress, which a client's request timeout
	// that progress resets (the TypeScript SDK's resetTimeoutOnProgress) needs.
	ProgressToken string `json:"progress_token,omitempty"`
}

// MCPSessionKept records that a client's session is live (a node serves it), so
// that the pruning of the sessions' streams, which deletes those whose last
// event is older than the session timeout, keeps its stream: a node appends one
// to the stream of each session it serves whose last event is half as old.
type MCPSessionKept struct{}

// MessageType implements Payload.
func (*MCPSessionKept) MessageType() Type { return TypeMCPSessionKept }

// MCPSessionEnded records that a client ended its session (an HTTP DELETE with
// its Mcp-Session-Id): a request in it is then answered 404, as the MCP spec
// says of a terminated session, by every node, where it would be resumed.
type MCPSessionEnded struct{}

// MessageType implements Payload.
func (*MCPSessionEnded) MessageType() Type { return TypeMCPSessionEnded }

// MessageType implements Payload.
func (*MCPLevelSet) MessageType() Type { return TypeMCPLevelSet }

// MessageType implements Payload.
func (*MCPSubscribed) MessageType() Type { return TypeMCPSubscribed }

// MessageType implements Payload.
func (*MCPUnsubscribed) MessageType() Type { return TypeMCPUnsubscribed }

// MessageType implements Payload.
func (*MCPCallStarted) MessageType() Type { return TypeMCPCallStarted }
