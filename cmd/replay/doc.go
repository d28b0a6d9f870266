// Command replay inspects recorded sessions.
//
//	replay list [--data DIR] [--limit N] [--json]
//	replay show <session-id> [--data DIR] [--json]
//
// list prints sessions with status, step count and start time; show prints a session
// as a timeline nested by causation, with each step's type, actor, latency and tokens.
// Both read the embedded event log (read-only, so they work while a node serves from
// the same directory, and on a copy of events.db in a directory they cannot write).
// A log of an older schema is migrated first when nothing holds the directory and
// it can be written (store.migrateThenRead).
// Text meant for a person goes through node.EscapeControls, so that a recorded task
// or answer cannot act on the terminal; --json prints it as recorded.
//
// verify re-decides a recorded session with this build's agent, and fork continues
// one live; with --config FILE the agent is the one node serve builds from FILE
// (internal/nodeconfig: tools, skills, disclosure, notes, chains, MCP servers).
// Each task is re-decided under the decision rules it was recorded with
// (actors.ContextRules); verify exits 0 when the session is deterministic, 1 at
// its first divergence (or an error), 3 when a task was recorded under rules this
// build does not have, which it names.
//
// export writes a session as JSON lines, and import loads such a file into a log.
// A session exported before its tasks ended is still the deployment's it came
// from: import refuses it, naming its unfinished tasks, unless --unfinished park
// (its unfinished tasks recorded as cancelled, so that no node resumes it) or
// --unfinished resume (this log's nodes go on with it) says what it is in the new
// log (unfinished.go).
package main
