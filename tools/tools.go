package tools

import (
	"context"
	"errors"
	"sync"
	"time"

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
	// Agent names the agent the call is made for (an agents file's; empty or
	// "default": the node's own). A tool that acts for an agent (its memory
	// namespace, its skills) reads it; the others ignore it.
	Agent string
	// Outward names the call for a service outside the log that dedupes by it (an
	// A2A agent's messageId, an MCP server's idempotency key): the same whenever the
	// call is performed again, like Key, but unique across event logs, where Key
	// ("<session>/<seq>") is unique only within one (messages.EffectKey.Outward).
	// Empty for a call made without a session's recorded request (a direct call, a
	// request of an older build): such a tool sends OutwardKey's fallback, Key.
	Outward string
}

// OutwardKey is the name of call c for a service outside the log: c.Outward, or
// c.Key when c has none.
func (c Call) OutwardKey() string {
	if c.Outward != "" {
		return c.Outward
	}
	return c.Key
}

// callKeyContext is the context key of WithCallKey.
type callKeyContext struct{}

// WithCallKey returns ctx carrying the idempotency key of the call it runs (Call.Key),
// for a tool whose function sees only its context and arguments (Func, Sub). FuncTool
// sets it from Call.Key; an empty key leaves ctx as it is.
func WithCallKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, callKeyContext{}, key)
}

// CallKey returns the idempotency key of the call ctx runs (WithCallKey), or "" when
// it carries none: a function tool with side effects performs them at most once per
// key, as Tool.Call says.
func CallKey(ctx context.Context) string {
	k, _ := ctx.Value(callKeyContext{}).(string)
	return k
}

// usageContext is the context key of WithUsageReport.
type usageContext struct{}

// usageSink is what ReportUsage adds to: a call's tools may report from several
// goroutines.
type usageSink struct {
	mu sync.Mutex
	u  messages.Usage
}

// ModelSpender is implemented by a tool whose calls may spend model tokens on the
// task's behalf (a sub-agent) and report them with ReportUsage: the performer reads
// the report of such a tool's calls only (WithUsageReport), which costs the others
// nothing.
type ModelSpender interface {
	SpendsModelTokens() bool
}

// SpendsModelTokens reports whether t says its calls may report model usage.
func SpendsModelTokens(t Tool) bool {
	s, ok := t.(ModelSpender)
	return ok && s.SpendsModelTokens()
}

// WithUsageReport returns ctx, for one call of a tool, and a func that returns what
// the call reported with ReportUsage: the model tokens it spent on the task's
// behalf, such as a sub-agent's, which count against the task's token budget. Read
// it once the call returned.
func WithUsageReport(ctx context.Context) (context.Context, func() messages.Usage) {
	s := &usageSink{}
	return context.WithValue(ctx, usageContext{}, s), func() messages.Usage {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.u
	}
}

// ReportUsage adds u to what the call ctx runs spent on models (WithUsageReport). A
// call run without a report (a test, a chain's inner step) drops it.
func ReportUsage(ctx context.Context, u messages.Usage) {
	s, _ := ctx.Value(usageContext{}).(*usageSink)
	if s == nil || u.IsZero() {
		return
	}
	s.mu.Lock()
	s.u = s.u.Add(u)
	s.mu.Unlock()
}

// ErrInvalidArguments marks an error caused by the model's arguments (not retryable).
var ErrInvalidArguments = errors.New("invalid tool arguments")

// Optional capabilities. A Tool may implement any of these; whoever runs or lists
// tools finds them by type assertion (LimitsOf, SourceOf, HasSideEffects), so a tool
// that implements none keeps working unchanged.

// Limits is implemented by a tool that sets its own call limits; the fields it
// leaves zero take the performer's defaults.
type Limits interface {
	Limits() CallLimits
}

// CallLimits bounds the calls of one tool. Zero means the default of whoever
// performs the call (actors.LocalEffects: its ToolTimeout and ToolConcurrency,
// DefaultMaxArguments and DefaultMaxOutput).
type CallLimits struct {
	// Timeout bounds one call, counted from its start.
	Timeout time.Duration
	// Concurrency bounds the calls running at once; more wait in a queue.
	Concurrency int
	// MaxArguments bounds the argument text, in bytes: longer arguments are refused
	// (ErrInvalidArguments) before they are parsed.
	MaxArguments int
	// MaxOutput bounds the result (and an error's text), in bytes: a longer one
	// reaches the model as its head and a note saying how much was cut (Truncate).
	MaxOutput int
}

// Defaults of CallLimits used when neither the tool nor its performer sets one.
const (
	DefaultMaxArguments = 1 << 20  // 1 MiB
	DefaultMaxOutput    = 64 << 10 // 64 KiB, about 16k tokens
)

// LimitsOf returns t's limits (zero when it sets none), with MaxArguments and
// MaxOutput defaulted.
func LimitsOf(t Tool) CallLimits {
	var l CallLimits
	if lt, ok := t.(Limits); ok {
		l = lt.Limits()
	}
	if l.MaxArguments <= 0 {
		l.MaxArguments = DefaultMaxArguments
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = DefaultMaxOutput
	}
	return l
}

// Sourced is implemented by a tool that comes from somewhere other than this
// binary's Go code: "mcp:<server>" for a tool of an MCP server, "skill:<name>" for
// one of an Agent Skill, "a2a:<name>" for a remote A2A agent.
type Sourced interface {
	Source() string
}

// SourceBuiltin is the source of tools that do not implement Sourced.
const SourceBuiltin = "builtin"

// SourceOf returns t's source: Source() when it implements Sourced, else "builtin".
func SourceOf(t Tool) string {
	if s, ok := t.(Sourced); ok {
		if src := s.Source(); src != "" {
			return src
		}
	}
	return SourceBuiltin
}

// Effectful is implemented by a tool that says whether its calls change the world
// (write a file, send a message). Every call gets its idempotency key (Call.Key)
// either way; a tool with side effects must perform them at most once per key.
type Effectful interface {
	SideEffects() bool
}

// HasSideEffects reports whether t says it has side effects. A tool that does not
// implement Effectful is assumed to have them: the safe assumption.
func HasSideEffects(t Tool) bool {
	if e, ok := t.(Effectful); ok {
		return e.SideEffects()
	}
	return true
}
