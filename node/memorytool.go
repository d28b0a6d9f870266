package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// The memory tool on a sharded cluster. A session runs on the owner of its
// partition, a namespace on the owner of its own: the agent's memory calls travel to
// the namespace's owner as a MemoryCommand (action "tool"), which performs them on
// its memory tool under the call's key and answers the result. So one node writes a
// namespace, and its writes wake the consolidator of that node. The recall action
// searches the sessions' log, not a namespace, and runs where it is called.

// memoryToolArgs are the arguments of a routed memory tool call.
type memoryToolArgs struct {
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Agent is the agent whose memory tool runs the call (one with a namespace of its
	// own: NamedAgent.MemoryNamespace); empty: the node's.
	Agent string `json:"agent,omitempty"`
}

// toolCallArgs decodes the memory tool call command c carries (Action
// memoryToolCall); an error wraps memory.ErrInvalid.
func toolCallArgs(c messages.MemoryCommand) (memoryToolArgs, error) {
	var a memoryToolArgs
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return memoryToolArgs{}, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
	}
	return a, nil
}

// memoryToolAnswer is the result of a routed memory tool call: its text, or its
// error (Invalid: the arguments' fault, for the model to read).
type memoryToolAnswer struct {
	Result  string               `json:"result,omitempty"`
	Error   string               `json:"error,omitempty"`
	Invalid *tools.ArgumentError `json:"invalid,omitempty"`
}

// routedMemoryTool is a memory tool (the one tool, op "", or one of its actions
// expanded, op set) whose calls run on the namespace's owner.
type routedMemoryTool struct {
	tools.Tool
	n         *Node
	op        string
	namespace string // the default namespace
	agent     string // the agent whose tool it is ("": the node's)
}

// Limits and SideEffects are the inner tool's.
func (t *routedMemoryTool) Limits() tools.CallLimits { return tools.LimitsOf(t.Tool) }
func (t *routedMemoryTool) SideEffects() bool        { return tools.HasSideEffects(t.Tool) }

// Call runs the call on the owner of the namespace it names (or the default one);
// a call whose namespace cannot be read runs here, where the tool says what is wrong.
func (t *routedMemoryTool) Call(ctx context.Context, c tools.Call) (string, error) {
	ns, ok := t.target(c.Arguments)
	if !ok {
		return t.Tool.Call(ctx, c)
	}
	args := memoryToolArgs{Tool: t.Spec().Name, Arguments: c.Arguments, Agent: t.agent}
	res, err := t.n.memoryExec(ctx, ns, memoryToolCall, c.Key, args)
	if err != nil {
		return "", err
	}
	return routedToolResult(args.Tool, res)
}

// target reads the namespace a call works in; ok is false for a call that is not
// about a namespace (recall) or whose arguments do not say it readably.
func (t *routedMemoryTool) target(arguments string) (string, bool) {
	op := t.op
	var a struct {
		Namespace *string `json:"namespace"`
	}
	if op == "" {
		var outer struct {
			Op   string          `json:"op"`
			Args json.RawMessage `json:"args"`
		}
		if json.Unmarshal([]byte(arguments), &outer) != nil {
			return "", false
		}
		op = outer.Op
		if len(outer.Args) > 0 && json.Unmarshal(outer.Args, &a) != nil {
			return "", false
		}
	} else if json.Unmarshal([]byte(arguments), &a) != nil {
		return "", false
	}
	if op == "recall" {
		return "", false
	}
	ns := t.namespace
	if a.Namespace != nil && strings.TrimSpace(*a.Namespace) != "" {
		ns = strings.TrimSpace(*a.Namespace)
	}
	return ns, memory.CheckNamespace(ns) == nil
}

// runMemoryTool performs a routed memory tool call on this node's memory tool.
// a is the call's arguments (toolCallArgs), key its key.
func (n *Node) runMemoryTool(ctx context.Context, key string, a memoryToolArgs) (json.RawMessage, error) {
	// The agent's own tool when it has one (a namespace of its own), else the node's.
	own, ok := n.memTools[a.Agent]
	if !ok {
		own = n.memTools[""]
	}
	t := own[a.Tool]
	if t == nil {
		return nil, fmt.Errorf("%w: this node has no memory tool %q for agent %q (every node should run the same agents file)", memory.ErrInvalid, a.Tool, cmp.Or(a.Agent, "default"))
	}
	return runRoutedTool(ctx, t, a.Tool, key, a.Arguments)
}

// runRoutedTool performs a routed tool call (a memory or notes tool's, on the owner
// of its stream) under the call's key, and returns its answer's JSON. A call that
// failed once ctx ended (this node stops, or gives the stream's partition up) is
// no answer: its error is returned, and the command, not acknowledged, reaches the
// stream's next owner, which makes the change under the same key (once). Answered,
// the tool's failure would have been the caller's result, a change never made.
func runRoutedTool(ctx context.Context, t tools.Tool, name, key, arguments string) (json.RawMessage, error) {
	out, err := t.Call(tools.WithCallKey(ctx, key), tools.Call{Key: key, Arguments: arguments})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %s cut off on the stream's owner (%w): %w", errStopping, name, context.Cause(ctx), err)
	}
	if errors.Is(err, eventlog.ErrFenced) {
		// Not this node's stream any more: not answered, so that its owner
		// performs the call (handleMemoryCommand).
		return nil, err
	}
	var ans memoryToolAnswer
	var invalid *tools.ArgumentError
	switch {
	case errors.As(err, &invalid):
		ans.Invalid = invalid
	case errors.Is(err, tools.ErrInvalidArguments):
		ans.Invalid = &tools.ArgumentError{Tool: name, Reason: err.Error()}
	case err != nil:
		ans.Error = err.Error() // as the tool's error would be, called here
	default:
		ans.Result = out
	}
	return json.Marshal(ans)
}

// routedToolResult reads the answer of a routed tool call as the tool's result.
func routedToolResult(name string, res json.RawMessage) (string, error) {
	var ans memoryToolAnswer
	if err := json.Unmarshal(res, &ans); err != nil {
		return "", fmt.Errorf("node: the answer of tool %s: %w", name, err)
	}
	switch {
	case ans.Invalid != nil:
		return "", ans.Invalid
	case ans.Error != "":
		return "", errors.New(ans.Error)
	}
	return ans.Result, nil
}
