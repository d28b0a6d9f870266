package tools

import (
	"context"
	"errors"

	"github.com/troupe-run/troupe/messages"
)

// Tool is something an agent can call. Implementations must be safe for concurrent use.
type Tool interface {
	// Spec describes the tool to models: name, description, JSON Schema of arguments.
	Spec() messages.ToolSpec
	// Call runs the tool. Arguments are the model's raw text: a tool validates them and
	// returns an error wrapping ErrInvalidArguments when they are malformed, so the model
	// can read what was wrong. Key is the call's idempotency key: a tool with side
	// effects performs them at most once per key.
	Call(ctx context.Context, c Call) (string, error)
}

// Call is one invocation of a tool.
type Call struct {
	Key       string
	Arguments string
}

// ErrInvalidArguments marks an error caused by the model's arguments (not retryable).
var ErrInvalidArguments = errors.New("invalid tool arguments")
