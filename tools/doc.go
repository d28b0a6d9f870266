// Package tools defines the Tool interface agents call, the Registry that names the
// tools an agent may use, and the built-in tools: Calculator (a safe arithmetic
// evaluator: it parses a small grammar, it never evaluates code) and Clock (the current
// time, read through an injected TimeSource so tests and replays are deterministic).
//
// Data enters a tool as a Call: the model's raw argument text and the call's
// idempotency key. It leaves as a result string for the model, or an error. Malformed
// arguments give an *ArgumentError wrapping ErrInvalidArguments whose text says what
// was wrong (and where, for an expression), so the agent can hand it back to the model
// to correct itself; such errors are permanent and must not be retried.
//
// Registry.Specs lists the tools sorted by name with compacted JSON Schemas, so the
// tool section of a prompt is byte-identical from step to step.
//
// actors.LocalEffects runs tools with timeouts, bounded concurrency, cancellation and
// panic recovery; this package holds only the tools themselves.
package tools
