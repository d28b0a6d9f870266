package node

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// The notes tool on a sharded cluster. An agent's notes are the stream
// notes/<agent>, written at its next seq by whoever writes them. SQLite refuses a
// second event at one (stream, seq), so two writers of one log lose nothing: the
// one that loses the seq refolds and tries again. ClickHouse cannot refuse it: two
// nodes adding a note at once each write one event at the same seq, and the stream's
// fold keeps one of them, so a note the model was told is there is lost. So, as a
// memory namespace is, the notes stream is owned like a session: a change (add,
// update, remove) travels to the owner of the stream's partition of troupe.tasks as
// a MemoryCommand (action "notes"), in order with the stream's other changes, which
// performs it on its notes tool under the call's key and answers the result. One
// node at a time writes the stream; a rebalance hands it over with the partition,
// and the next owner folds what the last one wrote before its first change. Reads
// (list, search) fold the stream from the log where they are called.

// notesToolCall is the action of a routed notes tool call: args notesToolArgs,
// answer memoryToolAnswer.
const notesToolCall = "notes"

// notesToolArgs are the arguments of a routed notes tool call.
type notesToolArgs struct {
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
}

// routedNotesTool is a notes tool (the one tool, op "", or one of its operations
// expanded, op set) whose changes run on the owner of the notes stream.
type routedNotesTool struct {
	tools.Tool
	n     *Node
	op    string
	agent string // the notes' agent: their stream is notes/<agent>
}

// Limits and SideEffects are the inner tool's.
func (t *routedNotesTool) Limits() tools.CallLimits { return tools.LimitsOf(t.Tool) }
func (t *routedNotesTool) SideEffects() bool        { return tools.HasSideEffects(t.Tool) }

// Call runs a change on the stream's owner and a read here; a call whose operation
// cannot be read runs here too, where the tool says what is wrong.
func (t *routedNotesTool) Call(ctx context.Context, c tools.Call) (string, error) {
	if !t.changes(c.Arguments) {
		return t.Tool.Call(ctx, c)
	}
	args, err := json.Marshal(notesToolArgs{Tool: t.Spec().Name, Arguments: c.Arguments})
	if err != nil {
		return "", fmt.Errorf("node: notes %s: %w", t.Spec().Name, err)
	}
	n := t.n
	cmd := messages.MemoryCommand{ID: n.cfg.IDs.NewID(), SessionID: notes.Stream(t.agent), Namespace: t.agent, Action: notesToolCall,
		Key: c.Key, Args: args, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	res, err := n.memoryRemote(ctx, cmd)
	if err != nil {
		return "", err
	}
	return routedToolResult(t.Spec().Name, res)
}

// changes reports whether a call changes the notes (add, update, remove): false for
// the reads and for arguments that do not say their operation readably.
func (t *routedNotesTool) changes(arguments string) bool {
	op := t.op
	if op == "" {
		var outer struct {
			Op string `json:"op"`
		}
		if json.Unmarshal([]byte(arguments), &outer) != nil {
			return false
		}
		op = outer.Op
	}
	return op == "add" || op == "update" || op == "remove"
}

// runNotesTool performs a routed notes tool call on this node's notes tool.
func (n *Node) runNotesTool(ctx context.Context, c messages.MemoryCommand) (json.RawMessage, error) {
	var a notesToolArgs
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return nil, fmt.Errorf("%w: notes: %v", memory.ErrInvalid, err)
	}
	t := n.notesTools[a.Tool]
	if t == nil {
		return nil, fmt.Errorf("%w: this node has no notes tool %q for %s (every node should run the same configuration)", memory.ErrInvalid, a.Tool, c.SessionID)
	}
	return runRoutedTool(ctx, t, a.Tool, c.Key, a.Arguments)
}
