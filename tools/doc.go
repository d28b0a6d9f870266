// Package tools defines the Tool interface agents call, the Registry that names the
// tools an agent may use, the ways to make a tool from Go code, and the built-in
// tools.
//
// A Tool has a Spec (name, description, JSON Schema of its arguments) and a Call. Data
// enters a tool as a Call: the model's raw argument text and the call's idempotency
// key. It leaves as a result string for the model, or an error. Malformed arguments
// give an *ArgumentError wrapping ErrInvalidArguments whose text names the field and
// what was expected, so the agent can hand it back to the model to correct itself;
// such errors are permanent and must not be retried.
//
// Making tools:
//
//   - Func makes a Go function func(ctx, A) (R, error) a tool: the schema is derived
//     from A (SchemaFor, through github.com/google/jsonschema-go, with a tool tag for
//     enum, bounds and pattern), or given by hand (WithSchema, WithSchemaFunc); R is
//     rendered as text (a string as is, anything else as compact JSON); the call's
//     idempotency key reaches the function as CallKey(ctx) (WithCallKey).
//   - NewToolbox groups operations (Sub, one per Go method or func) as one tool: collapsed,
//     it takes {"op": "<sub>", "args": {...}}; expanded (Expand, Expanded), it is one tool
//     per operation, named <tool>_<sub>. An agent's registry is built either way.
//   - Chain declares a sequence of tool calls offered as one tool, with arguments and
//     result rendered from text/templates over the chain's arguments and the earlier
//     steps' results; NewChainTools checks and builds them (a step may also call a
//     tool of a ChainCatalog, looked up when it runs: WithStepCatalog). A session runs
//     a chain step by step, each step recorded (package actors); ChainTool.Call runs it
//     in one call. ParseNamedCall reads a call of one tool by name through another
//     (call_tool), so that a session can run a chain called that way step by step.
//   - ArgumentParser reads arguments for a schema: JSON or key=value pairs (the text
//     protocol's form), coerced to the schema's types, validated, with size and depth
//     limits checked before the work they bound. Validated applies it to a tool that
//     takes raw JSON (an MCP server's).
//
// Optional capabilities, found by type assertion: Limits (a tool's own timeout,
// concurrency bound, argument and output sizes; see LimitsOf), Sourced (where a tool
// comes from: "builtin", "mcp:<server>", "skill:<name>"; SourceOf) and Effectful
// (whether calls change the world; HasSideEffects).
//
// Built-ins: Calculator (a safe arithmetic evaluator: it parses a small grammar, it
// never evaluates code), Clock (the current time, read through an injected
// TimeSource so tests and replays are deterministic), NewHTTPFetch (GET or HEAD of
// public http(s) URLs, with private, loopback, link-local and metadata addresses
// refused after DNS resolution and on every redirect, unless allowed) and NewFiles
// (read, write, list and stat confined to a root directory through os.Root). The
// notes built-in, whose state is events in the node's log, lives in tools/notes.
//
// Registry.Specs lists the tools sorted by name with compacted JSON Schemas, so the
// tool section of a prompt is byte-identical from step to step.
//
// actors.LocalEffects runs tools with timeouts, bounded concurrency, cancellation,
// panic recovery and output truncation (Truncate), reading each tool's Limits; this
// package holds the tools themselves and CallLimited, the one call under a tool's
// own limits (arguments, timeout, output) that a session's performer and a chain's
// step both make.
package tools
