// Package memory is agent memory: namespaces of memories ("user:alice",
// "agent:planner") in four tiers — working, episodic, semantic and perceptual —
// with core blocks always in an agent's context.
//
// A namespace is an event-sourced entity, like a session. Its changes are events
// (messages.MemoryAdded, MemoryUpdated, MemoryMerged, MemoryPromoted,
// MemoryDistilled, MemoryInvalidated, MemoryForgotten, MemoryCleared,
// MemoryBlockSet, MemoryBlockDeleted), each with the reason it was made and the
// sources it came from, appended to the node's event log in a stream of its own,
// Stream(namespace) = "memory/<namespace>", which is not a session. Its memories,
// its vector index (a vectorstore.Store), its keyword index (BM25), its entity graph
// and its core blocks are projections of that stream, rebuilt by folding it.
package memory
