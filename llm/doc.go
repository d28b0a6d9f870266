// Package llm is Troupe's model layer: the Model interface every agent calls, and the
// models that need no network — Scripted (replays a file of responses, for tests and
// replay) and Offline (a deterministic, rule-based planner that makes the embedded
// node useful with no API key). OpenAI-compatible providers plug in behind the same
// interface.
//
// A Request enters with the conversation so far and the tools on offer; a Response
// leaves with one assistant message (text, tool calls, or both) and its token usage.
package llm
