// Package llm is Troupe's model layer: the Model interface every agent calls, and the
// models that need no network — Scripted (replays a file of responses, for tests and
// replay) and Offline (a deterministic, rule-based planner that makes the embedded
// node useful with no API key). OpenAI-compatible providers plug in behind the same
// interface.
//
// A Request enters with the conversation so far and the tools on offer; a Response
// leaves with one assistant message (text, tool calls, or both) and its token usage.
//
// Streaming is optional (stream.go): a model that can implements Streamer, and a caller
// that wants an answer's increments as they form puts a DeltaFunc in the call's
// context (WithDeltas). Every layer in between passes the context on unchanged, and
// the innermost one calls StreamOrGenerate, which streams when both are there; each
// provider call streamed is numbered as an attempt, so a retried stream's increments
// can be told from the failed one's. The Response is whole either way.
package llm
