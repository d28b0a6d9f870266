// Package sqlite is the embedded event log: an eventlog.Log stored in one SQLite
// database (modernc.org/sqlite, pure Go, no cgo) in a data directory. It is the
// default of a single node, with nothing to install.
//
// Data enters through Append: session actors (through the event sink) hand it
// batches of sequenced messages.Envelope values. A single writer goroutine owns the
// write connection and commits the batches of concurrent Append calls together, one
// transaction per group, each batch in its own savepoint (group commit): a batch
// that conflicts fails alone, and the others commit. Data leaves through Read (one
// session's events from a seq, in seq order, byte for byte as appended) and Sessions
// (one summary row per session, maintained in the same transaction as the events),
// served by a pool of read connections beside the writer.
//
// # Files and durability
//
// Config.Dir holds events.db (with its -wal and -shm files) and LOCK. Open takes an
// exclusive flock on LOCK, so a second node on the same directory fails with
// eventlog.ErrLocked instead of corrupting it; the kernel releases the lock when the
// process dies. The database runs in WAL mode with synchronous=NORMAL: when Append
// returns, the batch survives a crash of the process (kill -9, panic, OOM kill),
// because the WAL is already in the operating system's hands. An operating-system
// crash or power loss may roll back the last commits, never corrupt the file; set
// Config.SyncFull to fsync every commit when that matters more than throughput.
// Checkpoints, which copy the WAL into events.db and pay the fsyncs, run on a
// background connection so that no Append waits for them.
//
// # Read-only mode
//
// Config.ReadOnly opens the log of a data directory for reading only, while a node
// may hold it (the replay command, tests): no lock, no writer, no files created but
// SQLite's shared -shm/-wal, and the database file opened with mode=ro and
// query_only. Readers in WAL mode see every transaction committed before each read,
// also after the open. Append fails with ErrReadOnly; a directory without a log
// fails Open with ErrNoLog.
//
// # Schema
//
// Table events holds one row per event: PRIMARY KEY (session_id, seq), UNIQUE id,
// the envelope's fields as columns and the payload as a BLOB, so that it can be
// queried with the sqlite3 shell (json_extract(payload, '$.usage.prompt_tokens')).
// Table sessions holds the summaries. PRAGMA user_version records the schema
// version; Open migrates older files and refuses newer ones.
package sqlite
