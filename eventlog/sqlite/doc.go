// Package sqlite is the embedded event log: an eventlog.Log stored in one SQLite
// database (modernc.org/sqlite, pure Go, no cgo) in a data directory. It is the
// default of a single node, with nothing to install.
//
// Data enters through Append: session actors (through the event sink) hand it
// batches of sequenced messages.Envelope values. A single writer goroutine owns the
// write connection and commits the batches of concurrent Append calls together, one
// transaction per group (group commit), the events of the group's batches inserted
// up to eighteen in one statement: a batch that conflicts fails alone (the group is then written again,
// each batch in its own savepoint and each event alone), and the others commit. Data leaves through Read (one
// session's events from a seq, in seq order, byte for byte as appended) and Sessions
// (one summary row per session, derived from its events by the writer: in the
// transaction of the events, or under load a little later, see lag.go), served by
// a pool of read connections beside the writer.
//
// # Files and durability
//
// Config.Dir holds events.db (with its -wal and -shm files) and LOCK. Open takes an
// exclusive flock on LOCK, so a second node on the same directory fails with
// eventlog.ErrLocked instead of corrupting it; the kernel releases the lock when the
// process dies. (Nodes that mean to share the directory say so: see Shared below.)
// The database runs in WAL mode with synchronous=NORMAL: when Append
// returns, the batch survives a crash of the process (kill -9, panic, OOM kill),
// because the WAL is already in the operating system's hands. An operating-system
// crash or power loss may roll back the last commits, never corrupt the file; set
// Config.SyncFull to fsync every commit when that matters more than throughput.
// Checkpoints, which copy the WAL into events.db and pay the fsyncs, run on a
// background connection so that no Append waits for them. The -wal file does not
// keep its peak size: it is cut back to a few MiB when SQLite starts it over, and
// emptied once the log has been idle for a second (see checkpoint.go).
//
// # Several processes (Shared)
//
// Config.Shared lets several node processes on one host write one log at once, such
// as a cluster on loopback that shares its sessions through Kafka partitions. Each
// takes a shared flock on LOCK: shared openers coexist, while an opener without
// Shared is refused with eventlog.ErrLocked as long as a shared one holds the
// directory, and the other way round. Each process runs its own writer goroutine and
// group commit; SQLite serializes the transactions of all of them, each begun with
// BEGIN IMMEDIATE, which waits up to Config.BusyTimeout for the write lock. Nothing
// about the stored events is cached in memory: inside the transaction, an insert
// that a key refuses (ON CONFLICT DO NOTHING) is classified by looking the event up
// again, so an event already stored by any process is a no-op, and a different event
// at a taken (session, seq) fails with eventlog.ErrSeqConflict; of two processes
// racing for one (session, seq), exactly one wins. The session summaries are
// updated in SQL from their stored values, in the same transaction (a writer that
// shares the log never defers them: see lag.go). An Append that
// finds the database still locked after the timeout fails with ErrBusy, having
// written nothing: callers retry it like any outage. Readers see every process's
// commits, and checkpoints are PASSIVE, which never wait for another process. The
// processes must share a local file system: WAL mode coordinates them through
// shared memory (the -shm file).
//
// # Upgrades of a shared log
//
// Processes of different builds may share a log during a rolling upgrade. Open
// migrates an older schema, and a running process of an older build, which
// checked the version only when it opened, keeps working, since each migration
// only adds (tables, columns, indexes its statements do not name). One did not:
// schema 5 made index events_by_epoch partial (epoch > 0), and a build of schema 4
// names that index in its prepared Read statement without epoch > 0, which SQLite
// then refuses to plan ("no query solution"): every Read from a seq above 1 of
// that process would fail until it restarts, and it would refuse to restart, the
// schema being newer than it knows. So a Shared Open that finds the log at
// schema 4 and held by another process (olderBuildSteps) moves it to schema 5
// with the full index kept, which this build's statements use as well; the
// first Open that holds the directory alone makes the index partial. Until then
// each append writes an index entry, as under schema 4. Schema 7 drops the
// UNIQUE (id) constraint, on which the writer of every older build relies to skip
// an event whose ID is stored at another position: a Shared Open that finds the
// log held by another process keeps it (notAloneSteps), whatever version it found
// the log at, and the first Open that holds the directory alone rebuilds the
// table without it (narrowIDIndex). Schema 8 replaces index events_by_epoch,
// which older builds name in their statements, with events_by_epoch_start: the
// old index stays beside the new one in the same way until an Open alone
// (dropEpochIndex). A process of an older
// build that opens the log after the migration is refused with the version it
// found and "run a newer build".
//
// # Fencing
//
// Log implements eventlog.Fencing. Own and AppendLeased go through the writer
// like Append: Own adds a row per partition to the ownership table under an epoch
// one above the highest recorded, and AppendLeased checks that its lease's epoch
// is its partition's highest, both inside the write transaction. Since SQLite
// serializes those transactions across every process sharing the log, a stale
// owner's batch either commits before the new owner's Own, and the new owner
// reads it, or fails with eventlog.ErrFenced: a stale write never lands. Each
// event row keeps the epoch it was appended under (0 for Append), and Read applies
// eventlog.Superseded like every Log.
//
// Log implements eventlog.Releasing as well: Release goes through the writer and
// sets released_us (schema 9) of the node's ownership rows at its epoch, where
// that epoch is still the partition's highest, inside the write transaction that
// SQLite serializes with every Own; MarkPublished raises published_us (schema
// 10) of those rows the same way; Owners reads each partition's row of the
// highest epoch. TakeOver is Own whose transaction reads those rows before it
// records the new epoch: they are exactly the ones it superseded.
//
// # Claims
//
// Log implements eventlog.Claiming. A claim (Claim, ClaimLeased) goes through the
// writer like Append; inside the write transaction, after the lease's check, the
// writer looks up the session's first event (by the primary key) and the highest
// epoch of its leased ones (the partial index events_by_epoch_start), and refuses the
// claim with eventlog.ErrSeqConflict if there is any, of any epoch (ErrFenced if
// one is of a higher epoch than the lease). The lookup and the insert are one
// transaction, serialized with every other writer of the file: of concurrent
// claims of one session, exactly one is written.
//
// # Read-only mode
//
// Config.ReadOnly opens the log of a data directory for reading only, while a node
// may hold it (the replay command, tests): no lock, no writer, no files created but
// SQLite's shared -shm/-wal, and the database file opened with mode=ro and
// query_only. Readers in WAL mode see every transaction committed before each read,
// also after the open. Append fails with ErrReadOnly; a directory without a log
// fails Open with ErrNoLog. A copy of events.db without its -shm file in a directory
// the reader cannot write (where SQLite cannot create -shm) is opened immutable, as
// the whole log, when no -wal file holds commits and no node holds the directory;
// otherwise Open says which of the two is in the way.
//
// # Schema
//
// Table events holds one row per event: PRIMARY KEY (session_id, seq), the
// envelope's fields and the epoch as columns and the payload as a BLOB, so that it can be
// queried with the sqlite3 shell (json_extract(payload, '$.usage.prompt_tokens')).
// IDs are unique in the log; an event's ID is nearly always the one derived from its
// position ("<session>/<seq>", which the primary key keeps unique), so the unique
// index events_by_id holds the others only, and table aliases the IDs of events
// that are derived from another position than theirs, which the writer looks up.
// Index events_by_epoch_start holds, of the leased events only (epoch > 0), those
// that may start a run of a session's events of one epoch (column epoch_start,
// cleared where the event before is known stored with the same epoch): an
// owner's events of a session cost it one entry. Read finds in it the highest
// epoch before fromSeq, and an embedded node, which appends without a lease,
// never writes to it. Table sessions holds the summaries, table ownership the epochs Own took, with the number of tasks submitted and ended
// (a session with a task not ended is running). Table fold_snapshots holds one
// fold snapshot per session (eventlog.Snapshots): a derived cache of its folded
// state, which a session actor checks against the log before it uses it, and
// which can be deleted at any time (its sessions then fold from the start).
// Table summary_lag holds, while summary rows lag their events, the highest
// rowid of events before them, from which Open rebuilds the rows after a crash
// (lag.go). PRAGMA user_version records the schema
// version; Open migrates older files and refuses newer ones.
package sqlite
