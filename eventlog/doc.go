// Package eventlog defines the event log seam: the append-only, per-session ordered
// store of every event Troupe records. Session actors append batches of sequenced
// envelopes; recovery, replay and the HTTP API read them back by session and seq.
//
// Implementations: package eventlog/sqlite (embedded, the default) and
// eventlog/clickhouse for clusters. Both run the conformance suite in
// eventlog/eventlogtest, and share CheckBatch (validation and in-batch duplicates),
// TaskStatus (how task.* events set a session's status) and Superseded (which
// events of a stale partition owner Read hides), so that they agree on the edge
// cases. Both also implement Fencing, with which the nodes of a cluster fence a
// partition's stale owner, Releasing, with which an owner that gives its
// partitions up cleanly (once the bus has all it appended for them) records it at
// its epoch, and its successor reads it (Owners) before it takes them, so that it
// publishes none of their ended sessions again (CheckRelease validates a
// release), and marks, while it holds them, up to when it published everything
// (MarkPublished, CheckMark), so that a successor of an owner killed before it
// released them publishes again only what ended after the mark, and Claiming, with which a session actor writes a
// session's first batch without reading the session first (CheckClaim validates
// its batch). Both implement Pruner, which deletes the streams of
// PrunablePrefixes (the bus's stored messages, the MCP clients' sessions, the A2A
// push configs) once of no use: by prefix, all those whose last event is older
// than a bound (PruneStreams, PruneAll batch by batch), or by a list of streams
// each with a bound of its own (PruneListed: the caller read each stream's last
// event, and one written since keeps it), at most MaxPruneListed of them in one
// deletion. On ClickHouse a deletion is one mutation of each table that holds
// the streams' rows, whatever their number: prune many streams at a time.
package eventlog
