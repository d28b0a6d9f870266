// Command replay inspects recorded sessions.
//
//	replay list [--data DIR] [--limit N] [--json]
//	replay show <session-id> [--data DIR] [--json]
//
// list prints sessions with status, step count and start time; show prints a session
// as a timeline nested by causation, with each step's type, actor, latency and tokens.
// Both read the embedded event log (read-only, so they work while a node serves from
// the same directory).
package main
