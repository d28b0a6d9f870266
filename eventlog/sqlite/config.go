package sqlite

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config configures an embedded event log. Only Dir is required; a zero field takes
// the default named in its comment.
type Config struct {
	// Dir is the data directory. Open creates it if needed (unless ReadOnly); it holds the database
	// (events.db with its -wal and -shm files) and the LOCK file.
	Dir string
	// ReadOnly opens an existing log for reading only, such as to replay or inspect a
	// data directory while a node holds it. A read-only Log takes no lock, creates no
	// directory or database, starts no writer, and never writes the database file:
	// Append fails with ErrReadOnly, Read and Sessions see what the writer committed,
	// also after the open. A missing directory or database, or one without a schema
	// yet, is an error wrapping ErrNoLog; a schema older than SchemaVersion must be
	// migrated by opening the log once without ReadOnly. As a WAL reader it shares
	// the -shm file with the writer, creating it (and -wal) if they are missing. Where
	// -shm is missing and the directory is not writable (a read-only copy of a log,
	// a read-only mount), the database is opened immutable and read alone, creating
	// nothing; unless a -wal file beside it holds commits or a node holds the
	// directory, which Open reports as an error saying so. The write options
	// (Shared, SyncFull, MaxGroupEvents, QueueSize, CloseTimeout) are ignored.
	ReadOnly bool
	// Shared lets several processes on one host write this log at once (a cluster of
	// nodes on one machine). Open then takes a shared flock on LOCK instead of an
	// exclusive one: shared openers coexist, an opener without Shared is refused with
	// eventlog.ErrLocked while any shared one holds the directory, and a shared opener
	// is refused while one without Shared holds it. Each process keeps its own writer
	// and group commit; SQLite's write lock (BEGIN IMMEDIATE, waited for up to
	// BusyTimeout) serializes the transactions of all processes, and every conflict
	// is decided against the database inside the write transaction: of two processes
	// appending different events at one (session, seq), exactly one succeeds and the
	// other gets eventlog.ErrSeqConflict, while appending an event already stored by
	// any process is a no-op. An append that still finds the database locked after
	// BusyTimeout fails with an error wrapping ErrBusy: nothing was written, and a
	// retry may succeed. Read, Sessions and Report see what every process committed;
	// Stats counts this Log's own work. The processes must share one host and a local
	// file system: SQLite's WAL mode coordinates them through shared memory (the -shm
	// file), which network file systems do not provide.
	Shared bool
	// BusyTimeout is how long a connection waits for a database lock held by another
	// connection, such as a checkpoint, an external sqlite3 shell or, with Shared,
	// the writer of another process. Default 5s.
	BusyTimeout time.Duration
	// SyncFull makes every commit wait for fsync (PRAGMA synchronous=FULL), so that
	// commits survive an operating-system crash or power loss too. The default,
	// synchronous=NORMAL in WAL mode, makes a commit durable across a crash of the
	// process (kill -9, panic, OOM kill) but not of the machine: a power loss can roll
	// back the last commits, never corrupt the database.
	SyncFull bool
	// MaxGroupEvents bounds the events the writer coalesces from concurrent Append
	// calls into one transaction (group commit). A single larger batch still goes in
	// one transaction. Default 1024.
	MaxGroupEvents int
	// QueueSize bounds the Append calls waiting for the writer; further calls block
	// (back-pressure) until their ctx ends. Default 1024.
	QueueSize int
	// ReadConns bounds the connections serving Read and Sessions concurrently. WAL
	// mode lets readers run beside the writer. Default 4.
	ReadConns int
	// CloseTimeout bounds how long Close waits for queued appends to be written.
	// Default 10s.
	CloseTimeout time.Duration
	// LockWait is how long Open waits for the directory's lock while a node in
	// another live process holds it exclusively (one stopping while its successor
	// starts), before it fails with eventlog.ErrLocked. The wait is logged once.
	// 0, the default, fails at once. A holder that is gone never makes Open wait:
	// the kernel released its lock when it died.
	LockWait time.Duration
	// Logger receives what the log cannot return to a caller, such as a failed
	// background checkpoint. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultBusyTimeout    = 5 * time.Second
	DefaultMaxGroupEvents = 1024
	DefaultQueueSize      = 1024
	DefaultReadConns      = 4
	DefaultCloseTimeout   = 10 * time.Second
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.MaxGroupEvents == 0 {
		c.MaxGroupEvents = DefaultMaxGroupEvents
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.ReadConns == 0 {
		c.ReadConns = DefaultReadConns
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every invalid field of c. Zero fields are valid: they take defaults.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is required (the directory that holds the event log)"))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("BusyTimeout is %s, want >= 0", c.BusyTimeout))
	}
	if c.ReadConns < 0 {
		errs = append(errs, fmt.Errorf("ReadConns is %d, want >= 0", c.ReadConns))
	}
	if !c.ReadOnly { // a read-only Log ignores the write options
		if c.MaxGroupEvents < 0 {
			errs = append(errs, fmt.Errorf("MaxGroupEvents is %d, want >= 0", c.MaxGroupEvents))
		}
		if c.QueueSize < 0 {
			errs = append(errs, fmt.Errorf("QueueSize is %d, want >= 0", c.QueueSize))
		}
		if c.LockWait < 0 {
			errs = append(errs, fmt.Errorf("LockWait is %s, want >= 0", c.LockWait))
		}
		if c.CloseTimeout < 0 {
			errs = append(errs, fmt.Errorf("CloseTimeout is %s, want >= 0", c.CloseTimeout))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventlog/sqlite: invalid config: %w", err)
	}
	return nil
}
