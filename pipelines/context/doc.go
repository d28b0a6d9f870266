// Package context builds what reaches a model on one call: from the candidate
// items a caller gathers (the system prompt, the task, core memory, notes,
// evidence, the conversation's turns, summaries of turns), it selects what fits a
// token budget, structures it into fixed sections and compresses what still does
// not fit, and reports every decision (messages.ContextReport).
//
// The pipeline is gather → select → structure → compress:
//
//   - Gather is the caller's: it makes one Item per candidate, with a stable ID
//     ("system", "task", "memory/core", "evidence/<chunk>", "note/<n>", "turn/<i>",
//     "summary/<from>-<to>"), a kind, a section, its text or chat message, a
//     relevance in [0, 1] and a recency position. Items sharing a Group are kept or
//     dropped together: an assistant message with tool calls and the tool results
//     answering it are one group, so a result never travels without its call.
//   - Select scores each candidate (Options.Score documents the formula) and packs
//     groups greedily, best first, into the budget: the window less the reserved
//     output less the stable prefix (the Role & Policies section). Pinned items (the
//     task) are never dropped. Of the conversation's turns only the latest
//     Options.HistoryTurns are candidates. A message that joins several items (the
//     system message's stable State items, the briefing) is then counted as it is
//     sent, with a Cl100k Tokenizer (a join can count more than its parts), and the
//     lowest-value groups are dropped until it fits (Options.AdditiveJoins).
//   - Structure orders what is kept into the sections Role & Policies, Task, State,
//     Evidence, Context and Output, and renders them (Context.Messages for a chat
//     request, Context.Text for one text).
//   - Compress runs only while the context is still over budget (pinned items too
//     big): it cuts the middle out of the lowest-value pinned items' text,
//     keeping its head and its tail, and marks each cut with "[… N tokens
//     truncated]". A caller that can summarise (Options.Summarize)
//     learns from the report what to summarise, lowest value first; the summary is
//     its effect to record (PurposeCondenseSection for an item that is always
//     sent), and comes back as an Item of kind "summary", in the section of what
//     it Replaces, for the next build.
//
// The package is pure: no I/O, no clock, no randomness, no map-order dependence.
// The same items and options always give the same bytes, so a session's decisions
// that build a context stay replayable. Tokens are counted with a rag.Tokenizer
// (Cl100k: cl100k_base, rag.Cl100k's counts); a caller that counted an item already sets
// Item.Tokens and is not asked again.
//
// Importers alias the package, as its name is the standard library's:
//
//	import pctx "github.com/troupe-run/troupe/pipelines/context"
package context
