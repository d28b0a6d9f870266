// Package notes is the notes built-in tool: structured notes an agent keeps for
// itself (a type, tags and a body each), which it adds, lists, searches, updates
// and removes across its tasks and sessions.
//
// The notes are event-sourced, like a session. Every change is an event —
// messages.NoteAdded, NoteUpdated or NoteRemoved — appended to the node's event log
// (eventlog.Log: SQLite embedded, ClickHouse in a cluster) in a stream of its own,
// "notes/<agent>" (Stream), which is not a session: no task ever runs there, and the
// node neither resumes it nor counts it as one (IsStream). The notes are the fold
// of that stream, so reopening the log rebuilds them exactly, and "why is this note
// here?" has an answer in the log.
//
// Data enters as calls of the tool (Toolbox): {"op": "add", "args": {...}}, or
// expanded (Tools with Config.Expand) as notes_add, notes_list, notes_search,
// notes_update and notes_remove, each with a JSON Schema derived from its Go argument
// type. It leaves as JSON text for the model: the notes, or a readable error that
// wraps tools.ErrInvalidArguments when the model's input was at fault (an unknown
// id, a tag that is not a word, a body or a tag list past its limit, one note too
// many), with nothing written.
//
// A write is idempotent by the tool call's key (tools.CallKey, which the node sets
// from the effect key): a write whose key is already in the stream is not made
// again, so a call re-issued after a crash or replayed changes the notes once.
// Writers of one stream (two tool calls at once, two nodes on one log) append at the
// stream's next seq; the one that loses the seq to another refolds the stream and
// tries again (at most MaxAttempts times). That needs a log that refuses a second
// event at one (stream, seq), as SQLite does; ClickHouse cannot, so a sharded node
// sends its changes to the stream's owner (package node, notesroute.go) and one
// writer at a time appends.
//
// Search ranks the notes with BM25 over their type, tags and body (the ranking of
// tools/disclosure), after filtering by type and tags.
package notes
