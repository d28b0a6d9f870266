package messages

// TypeModelDelta is an increment of a model's answer as it streams (ModelDelta). It
// is live only: it travels from the node performing the model call to the watchers of
// the session (the node's stream API, node run) and is never appended to a session's
// log, never published on the bus, never replayed. Its envelope has Seq 0.
const TypeModelDelta Type = "model.delta"

// ModelDelta is one increment of a streamed model answer, sent to a session's
// watchers while the call runs. Deltas are best effort: a slow watcher misses some,
// and the session's ModelResponded (recorded whole, once) is the answer; a reader
// shows the deltas of a call until its ModelResponded with the same Key arrives, then
// shows that instead.
type ModelDelta struct {
	// Key is the model call's idempotency key (ModelRequested.Key): it tells calls
	// apart, the parallel calls of one session too.
	Key string `json:"key"`
	// Step is the call's step (ModelRequested.Step).
	Step int `json:"step"`
	// Seq numbers the call's deltas from 1, across its attempts, in the order they
	// were produced.
	Seq uint64 `json:"seq"`
	// Attempt numbers the provider calls streamed for this model call from 1: a retry
	// of a stream cut mid-answer, or a fallback to another model, streams again from
	// the start under the next attempt.
	Attempt int `json:"attempt"`
	// Reset is set on the first delta of an attempt after the first: the text of the
	// earlier attempts belongs to no answer, and a reader discards it.
	Reset bool `json:"reset,omitempty"`
	// Content is the next piece of the answer's text.
	Content string `json:"content,omitempty"`
	// A tool-call increment: the call's position in the answer's ToolCalls, its ID and
	// name (usually with its first increment only) and the next piece of its JSON
	// arguments.
	ToolCallIndex int    `json:"tool_call_index,omitempty"`
	ToolCallID    string `json:"tool_call_id,omitempty"`
	ToolName      string `json:"tool_name,omitempty"`
	Arguments     string `json:"arguments,omitempty"`
}

// MessageType implements Payload.
func (*ModelDelta) MessageType() Type { return TypeModelDelta }
