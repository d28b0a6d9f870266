// Package clickhouse is the distributed event log: an eventlog.Log stored in
// ClickHouse, through clickhouse-go/v2 over the native protocol. Nodes of a
// cluster share one database; the embedded default is eventlog/sqlite, and both
// pass the conformance suite in eventlog/eventlogtest.
//
// Data enters through Append: the event sink hands it batches of sequenced
// messages.Envelope values (about four per agent step). A single writer goroutine
// gathers the batches of concurrent calls, by size (Config.BatchSize events,
// Config.MaxBatchBytes) and by time (Config.FlushInterval), and writes each group
// with one INSERT. Data leaves through Read (one session's events from a seq, in
// seq order, byte for byte as appended), ReadN (a page of them, read in windows
// of seqs so that it costs about that page, a page bounded by bytes ending
// where the stored payload sizes reach its bound: eventlog.PageReader) and Sessions
// (one summary per session).
//
// # When Append returns
//
// Append returns nil only after ClickHouse accepted the INSERT that holds the
// batch (or found every event of it already stored), so the sink may commit its
// bus offsets then. While ClickHouse is unreachable or failing with an error
// that may pass, the writer retries the group with exponential backoff
// (Config.RetryInitialBackoff up to Config.RetryMaxBackoff), and Append blocks
// until the write succeeds or its ctx ends. The writer logs such an outage once
// as it starts (a warning with its cause) and once as it ends (how long it
// lasted), each attempt at debug level.
//
// Log implements eventlog.Health, for a node's readiness check: Writable returns
// nil at the cost of an atomic load while the writer's last attempt went
// through; once one failed, why, until an INSERT goes through again, the
// writer's or Writable's own probe (at most one a second: one row into table
// write_probes, schema 14, which no reader reads and which merges keep at one
// row), so that a node learns that ClickHouse takes writes again although no
// session wrote. That probe, like every request, ends when its ctx does, even
// on a server that accepts connections and never answers (hung, or stopped
// with SIGSTOP): a new connection is bounded by the request's ctx up to the
// server's hello, which clickhouse-go's handshake waits for until DialTimeout
// whatever ctx says. Events
// are never dropped: a caller either gets nil, or an error, and then its batch
// was not written ("not written" in the message: refused before the writer took
// it), or may have been (its ctx ended or Close gave up while the writer was
// writing it). Appending the batch again is always safe, because Append is
// idempotent on event IDs. An attempt whose callers all gave up is stopped then,
// rather than waited out (up to Config.QueryTimeout) while the batches behind it
// wait.
//
// Buffering is bounded: Config.MaxBuffered events and Config.MaxBufferedBytes
// bytes may wait for or be in the writer. Beyond that, Append blocks until there
// is room or its ctx ends, so an outage backs work up into the bus rather than
// into memory. Stats reports the buffered events, retries and waits.
//
// # Idle connections
//
// A connection that sat idle is not trusted: a NAT, a load balancer or a firewall
// between the node and ClickHouse may have forgotten it without a word, and then
// its bytes vanish and no error ever comes. The first request on a connection after
// a second or more of silence must see the start of its answer within
// Config.ResponseTimeout; otherwise the connection is closed, with the others that
// sat idle as long, and the request runs again on a new connection (the writer
// retries its writes, and Read, Sessions and the fencing queries their reads),
// rather than waiting out Config.QueryTimeout. A connection the server closed is
// seen before it is used.
//
// # Idempotency and conflicts
//
// ClickHouse has no transactions and no unique keys. Before it inserts a group,
// the writer looks up, in one query, what is stored at the group's (session_id,
// seq) positions and where the group's IDs are stored, and decides each call's
// batch as a whole: an event already stored at its position is skipped (at-least-
// once delivery), and a batch with a different event at a taken position, or
// with an ID stored at another position, fails with eventlog.ErrSeqConflict and
// nothing of it is written. Calls in the same group are decided in order against
// each other too. The groups of one Log are checked and inserted one after the
// other (the next group's lookup overlaps the current INSERT, and is completed
// with that INSERT's rows before it is used), so racing writers through one Log
// are detected, and the conformance suite runs with its strictest Features.
//
// The check is not atomic across Logs: two processes appending different events
// at one free position at the same moment can both succeed. That is two writers
// for one session, which the single-writer invariant (Kafka gives each session
// one owner) rules out; conflicts with events another process already wrote are
// detected. A node that Kafka evicted while it hung is such a second writer: see
// Fencing, which gives each owner an epoch. If two writers of one epoch race
// anyway, Read reports the position as corrupt (messages.ErrCorrupt naming the
// session and seq) instead of picking one, until a background merge of the events
// table keeps one of the two rows.
//
// # Fencing
//
// Log implements eventlog.Fencing, for the nodes of a cluster. Own adds a row per
// partition to the ownership table, under an epoch one above the highest
// recorded, and reads the partitions' rows back: if another node took one of
// them at the same or a higher epoch meanwhile, it takes a new epoch (see Own).
// AppendLeased checks the lease in the lookup that precedes its group's INSERT: the
// partition's highest recorded epoch must be the lease's, and no event of a higher
// epoch may hold one of the batch's positions; otherwise the call fails with
// eventlog.ErrFenced and nothing of it is written. Every row carries the epoch it
// was written under (0 for Append), and epoch is part of the events table's
// sorting key, so that rows of different epochs at one position all survive
// merges.
//
// Log implements eventlog.Releasing too: Release reads the partitions' latest
// ownership rows and adds a row to table releases (schema 12) for each that the
// node still owns at its epoch; Owners reads each partition's latest ownership
// row and the release of that very (epoch, node), if any. A release whose check
// passed just before another node's Own lands at an epoch that is no longer the
// latest, where Owners does not see it. MarkPublished does the same into table
// published_marks (schema 13), an INSERT per mark (a ReplacingMergeTree whose
// merges keep the greatest mark of each (partition, epoch, node)), and Owners
// reads the greatest mark of each partition's latest ownership row.
//
// TakeOver, what a node taking partitions over decides on, is Own followed by a
// read of each partition's latest ownership row below the new epoch, with its
// release and mark: the two are not one step, as in SQLite. Guaranteed (with a
// single server, or reads that see every acknowledged INSERT, which Own's
// read-back needs as well): another node's Own that returned before TakeOver
// began recorded a lower epoch (Own retries until no row at its epoch or above
// is seen), so the read finds its row, or a later one, and never reports a
// partition released that such an owner took afterwards. Not guaranteed, each
// costing duplicates on the bus rather than a loss: the row read may be that of
// an Own attempt abandoned for a higher epoch (neither released nor marked), and
// a release or mark whose check passed before the new epoch was recorded may
// land after the read and be missed. Replicas that lag (reads not sequentially
// consistent) break the guarantee, as they break Own's read-back.
//
// The race window: the check and the INSERT are two statements, and the writer
// may hold a checked group for as long as the INSERT before it takes (pipelining),
// or for as long as the process is frozen between them (SIGSTOP, a VM pause, a
// GC pause, a network partition with the INSERT in flight). A stale owner's group
// checked before the new owner's Own landed may thus be inserted after the new
// owner read the session, and even after it wrote the same seqs (with the same
// canonical IDs, and other content). Read makes that safe: at each seq it returns
// the event of the highest epoch, and it hides the events of an epoch lower than
// that of an event at a lower seq (eventlog.Superseded), which the new owner
// cannot have folded. The new owner's own appends ignore such rows: a lower
// epoch's event at a position, or a lower epoch's copy of an ID at another
// position, is no conflict for it, and its event is inserted beside it. So a
// session actor never reads two events at one seq, and never loses one of the
// current owner's. After the INSERT (beside the next group's), the writer reads
// the leases' epochs again and fails a batch whose partition was taken meanwhile
// with ErrFenced (see confirm): its writer stops instead of publishing the batch
// and issuing its effects, and AppendLeased returns nil only for a batch the next
// owner folds.
//
// Stale rows still reach the aggregates that materialized views fill, which do
// not look at epochs: the sessions summaries (a stale event past the new owner's
// last seq counts in events and last_seq) and open_tasks. The status must not
// follow them: a stale task.failed or task.completed would end, in the summaries
// and in open_tasks, a session that its new owner still runs, and if that owner
// died too, the next one would not find it among the running sessions and never
// resume it; a stale task.submitted would keep a session whose tasks all ended
// running, resumed at every start. So table fenced_events lists the stale rows.
// The server lists them itself, as it processes each INSERT (a materialized view,
// schema/0010_stale_rows.sql): the rows whose epoch is not the current epoch of
// the partition of their lease (a column of events), without the stale writer's
// help, since it may die, be killed or lose its connection right after its
// INSERT. A row the view lists landed after Own recorded the new epoch, which Own
// does before its taker reads anything, so the new owner may not have read it; a
// row it does not list landed before, and the new owner folds it. The writer that
// finds its batch fenced after its INSERT lists nothing itself (builds before
// schema 11 listed the batch's rows, also those that landed just before the
// takeover, which the new owner folded and went on from): its INSERT returned
// after the server wrote the view's rows, and an INSERT cut off between the
// events table and the view's table is retried whole. Rows that landed before
// the takeover are still listed when a copy of them lands after it (an attempt
// retried, or completed by dropCut, whose lookup found the lease still current):
// a copy has its row's key; and so is a row the server wrote into events just
// before Own recorded the new epoch and listed just after. Such rows are hidden
// only where no owner wrote after them (see below), and a writer still waiting
// for them is told ErrFenced.
//
// Read leaves out the rows fenced_events lists at the end of a session, those no
// owner wrote after: the new owner may have read the session before they landed,
// and then its successor must not fold them either (a stale task.failed that the
// new owner never saw would end the session for good). A listed row that another
// owner's events follow was read by that owner, and stays. Sessions reads the
// status, events, steps and last seq of every session that fenced_events lists
// from its events, as Read sees them (statuses), and leaves out a session none of
// whose events Read returns (a stale owner's first task); the running listing
// reads, besides the sessions open_tasks holds, those that fenced_events lists
// and no listing found ended yet (settled). It does the same for a session whose
// latest task ended but whose summary counts more tasks than ended ones (a stale
// task.submitted that fenced_events does not list). Report and the analytics
// views (model_usage, tool_usage, session_outcomes, memory_ops, session_agents,
// schema/0011_analytics_per_task.sql) count, at each (session, seq), the row of
// the highest epoch, and of the rows fenced_events lists those Read keeps: a
// listed row beside a row of a higher epoch at its seq, or after the last row of
// its session that is not listed, counts for nothing (staleRows in report.go).
// They count sessions only (eventlog.IsSession; memory_ops counts the memory
// namespaces' events), and charge each model call to the agent of its own task,
// the latest submitted at or before it.
//
// What fenced_events misses: a stale row whose INSERT was cut off after the server
// wrote it into events but before it wrote the view's rows, and not retried (its
// callers gave up and dropCut found the lease taken, or the writer's process
// died); a stale row written by a build before schema 10
// (its lease's partition is not stored) whose writer did not confirm it; and, for
// a moment, a row the server has written into events and not yet listed (it
// writes an INSERT's views after its table). Such rows count as the rows of a
// writer that was not fenced.
//
// # Claims
//
// Log implements eventlog.Claiming. A claim (Claim, ClaimLeased) goes through the
// writer like Append, and its group's lookup also reads the highest seq and epoch
// of the claimed session's events, of every epoch: a session with any event
// refuses the claim with eventlog.ErrSeqConflict (ErrFenced when an event is of a
// higher epoch than the lease), and nothing of it is written. The writer decides
// a group's calls in order, each against the events accepted before it (also
// those of the group inserted just before), so of claims of one session through
// one Log exactly one is written; a claim is fenced and confirmed like
// AppendLeased. Across processes the check is as atomic as Append's, no more: two
// processes claiming one session at the same moment can both write (two writers
// of one session, which fencing rules out in a cluster). A claim retried by the
// writer after an INSERT whose outcome it could not know is written again if the
// session holds exactly the claim's events under its epoch (that INSERT landed),
// and refused otherwise.
//
// An INSERT whose outcome the writer cannot know (the connection broke while it
// ran) is retried, and may then be stored twice. Every table collapses such
// duplicates: events and event_ids are ReplacingMergeTree tables ordered by
// position and by ID, so their copies merge into one row, and until they do, Read
// skips the repeated row; the sessions summary counts distinct seqs. So an event
// is never visible twice, although count() on the raw events table may count a
// row twice until its parts merge (FINAL, or OPTIMIZE … FINAL, shows the
// collapsed state).
//
// An INSERT writes the events table first and then, one after the other, the
// tables that the materialized views fill (event_ids, the session summaries,
// open_tasks, fenced_events); one cut off in between (the server stopped or
// failed, or the writer stopped an attempt whose callers all gave up) leaves
// events that those tables lack. A retried attempt inserts all its events again,
// also those found stored, so that the tables get their rows. An attempt that is
// not retried, because its callers gave up, is completed in the background: the
// writer looks its events up and inserts again those that landed (see dropCut),
// unless their lease is no longer current. Close does not wait for such a
// repair once the buffered appends are written or failed: it stops it (one may
// hang up to Config.QueryTimeout on a connection the network forgot). What stays
// missing after that — the writer's process died or closed first, the repair
// failed, or the lease was taken — is missing for good: a caller appending the batch again finds its events stored
// and skips them. Read, which reads the events table, returns such events; the
// listings miss them (a session not listed, or listed with fewer events), the
// conflict check misses an unconventional ID that event_ids lacks, and a stale
// owner's row that fenced_events lacks counts as valid.
//
// # Schema
//
// Open creates Config.Database (unless Config.MustExist, which refuses a
// database that is missing or holds no log) and applies the numbered files of schema/ that
// the schema_migrations table does not list yet (see Migrations); the same
// files are the deployable DDL (deploy/clickhouse/README.md). They stay within
// what ClickHouse 18.16 (Debian's package, used by deploy/clickhouse.sh) and
// current releases both accept: the envelope's ts as Int64 Unix microseconds (no
// DateTime64), String columns (no LowCardinality), no TTL or codecs, and no
// JSONExtract*: query payloads with visitParamExtract*, for example
//
//	SELECT visitParamExtractString(payload, 'model'), count()
//	FROM events FINAL WHERE type = 'model.requested' GROUP BY 1
//
// (which also counts a stale owner's rows: the analytics views of
// schema/0011_analytics_per_task.sql show how to leave them out). Table events holds one
// row per event, ordered by (session_id, seq, epoch), with the partition of the
// lease it was appended under. Table
// event_ids lists the events whose ID is not "<session_id>/<seq>" (the IDs
// session actors give), ordered by ID, for the conflict check. Table sessions
// holds per-session aggregate states (distinct events and steps, last seq,
// latest task.* type, first and last ts) and table session_tasks the number of
// tasks submitted and ended (a session with a task not ended is running), each
// filled by a materialized view, so that Sessions reads one row per session. The
// running sessions (Filter{Status: running, SessionsOnly: true}, listed at every
// start, partition assignment and list of pending approvals) are read by key from
// table session_summaries (the same states and the parent, in granules of 32
// rows), for the sessions that table open_tasks holds: a CollapsingMergeTree with
// a row +1 per task submitted and -1 per task ended (by its correlation ID), whose
// pairs vanish as parts merge, so that the listing costs what the running sessions
// cost, not what every ended session and every stream that is no session (a
// dashboard sign-in) does. open_tasks may keep an ended session (a row written
// twice); the listing checks each against its summary. Table ownership lists the
// epochs Own took, per partition, table releases the clean releases of its
// owners and table published_marks what they published (see Fencing), and table fenced_events the events written
// under an epoch that was no longer current (see Fencing).
//
// # Fold snapshots
//
// Log implements eventlog.Snapshots with table fold_snapshots (schema 16): a
// session actor passivated after a long history saves its folded state there,
// and, re-activated, folds the events after it instead of the whole history.
// Each save is an INSERT of a row stamped with when it was saved (saved_us,
// rising per Log); a ReplacingMergeTree keeps each session's latest, and
// LoadSnapshot takes the latest of the rows not merged yet, reading the state of
// that one row (a granule a row). The last saved wins whatever its seq, as in the
// SQLite log. Saves are not fenced: a stale owner may save the state of a
// history that diverged, which the session actor, checking the log's event at
// the snapshot's seq, does not use (actors.TestStaleOwnersSnapshotIsNotUsed). A state
// beyond Config.MaxSnapshotBytes (64 MiB) is refused with ErrSnapshotTooLarge,
// the session keeping the snapshot it had. A snapshot is a derived cache: the
// pruning of streams leaves it (sessions are not pruned), and dropping the table's
// rows costs only whole folds.
//
// # Large payloads
//
// A payload is a String column value: it is stored and returned byte for byte,
// never truncated. The native protocol and String type set no limit of their
// own; payloads of 5 MiB are part of the conformance suite, and 256 MiB were
// written and read back against ClickHouse 18.16 here. What bounds them is
// memory: the server's max_memory_usage per query (10 GB by default, 2 GB on the
// development server of deploy/) and the node's, since the writer holds a copy
// of each buffered payload and Read returns whole sessions (ReadN, pages). Keep event payloads
// small (well under 1 MiB): every Read of a session carries them and every merge
// rewrites them. Put big blobs, such as fetched documents or files, in a blob
// store and record a reference in the event.
//
// # Compatibility notes
//
// Use the native port (9000); clickhouse-go's HTTP mode fails against 18.16.
// Inserts go through PrepareBatch with an explicit column list (Exec of INSERT …
// VALUES hangs against 18.16), and LZ4 and ZSTD compression both work. Current
// releases refuse a joined subquery without an alias (joined_subquery_requires_alias):
// give each one an alias, which 18.16 accepts too.
//
// The package's tests run on 18.16 (CI's server). deploy/clickhouse-compat.sh
// runs the statements the package sends on a current release (chdb-core, the
// ClickHouse engine in a Python module, no server): TestDumpStatements, skipped
// unless TROUPE_CH_COMPAT_DUMP names a file, drives a Log over a recording
// connection and writes every statement it sent, arguments bound as literals: the
// migrations from an empty database (twice, as two nodes starting at once apply
// them), then appends, claims, reads, session listings, fencing, releases, prunes
// and the analytics queries, with the number of rows some of them return. A new
// query of the package belongs in that test.
package clickhouse
