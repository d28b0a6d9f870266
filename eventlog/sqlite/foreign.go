package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotLog means that the data directory's events.db is no event log: not a
// regular file (a directory, a FIFO), not a SQLite database, or another program's
// database (tables, but not the log's). Open refuses it, read-only or not, and
// changes nothing in it.
var ErrNotLog = errors.New("eventlog/sqlite: not an event log")

// regularFile returns an error wrapping ErrNotLog unless fi, path's, is a regular
// file: SQLite fails on a directory with "disk I/O error", and its open of a FIFO
// blocks until a writer comes.
func regularFile(fi fs.FileInfo, path string) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	kind := "special file"
	switch t := fi.Mode().Type(); {
	case t&fs.ModeDir != 0:
		kind = "directory"
	case t&fs.ModeNamedPipe != 0:
		kind = "FIFO"
	case t&fs.ModeSocket != 0:
		kind = "socket"
	case t&fs.ModeDevice != 0:
		kind = "device"
	}
	return fmt.Errorf("%w: %s is a %s, not a database file", ErrNotLog, path, kind)
}

// notDatabase returns, for SQLite's "file is not a database" about path (which
// names neither the file nor what it means here), an error wrapping ErrNotLog that
// says so, and nil for any other error.
func notDatabase(err error, path string) error {
	var e *msqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_NOTADB {
		return fmt.Errorf("%w: %s is not a SQLite database", ErrNotLog, path)
	}
	return nil
}

// schemaOf reads the PRAGMA user_version of db and counts its tables, and those
// named events, in one statement: one snapshot of the file, so that a log another
// process is creating meanwhile (nodes with Config.Shared starting together, a
// reader polling beside a starting node) is never seen at version 0 with tables.
func schemaOf(ctx context.Context, db *sql.DB) (s dbSchema, err error) {
	err = db.QueryRowContext(ctx, `SELECT (SELECT user_version FROM pragma_user_version),
		count(*), count(*) FILTER (WHERE name = 'events') FROM sqlite_master WHERE type = 'table'`).Scan(&s.version, &s.tables, &s.events)
	return s, err
}

// dbSchema is what schemaOf reads.
type dbSchema struct{ version, tables, events int }

// checkTables returns an error wrapping ErrNotLog when the tables of the database
// at path are not an event log's: a log of any version this build knows has the
// events table, which its first migration made, and one of version 0 (no schema
// yet) has no table at all. A database another program wrote (its own
// user_version, which many set) is so refused before a migration or a read
// touches it. A version above SchemaVersion is not checked: a newer build's tables
// are its own.
func checkTables(s dbSchema, path string) error {
	switch {
	case s.version > SchemaVersion:
		return nil
	case s.version == 0 && s.tables > 0:
		return fmt.Errorf("%w: %s holds %d tables of another program (and no event log's schema)", ErrNotLog, path, s.tables)
	case s.version > 0 && s.events == 0:
		return fmt.Errorf("%w: %s has schema version %d but no events table: it is another program's database", ErrNotLog, path, s.version)
	}
	return nil
}

// checkLogFile makes sure, before Open writes anything (the writer's first pragma
// puts the database in WAL mode, a migration adds tables), that the database at
// path is the event log's or can become it: missing, empty, or a SQLite database
// of a schema this build knows that checkTables passes. It reads the file with a
// read-only connection of its own.
func checkLogFile(ctx context.Context, path string) (err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
	}
	if err := regularFile(fi, path); err != nil || fi.Size() == 0 {
		return err
	}
	db, err := sql.Open("sqlite", dsn(path, "query_only(1)")+"&mode=ro")
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: open %s read-only: %w", path, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	db.SetMaxOpenConns(1)
	sc, err := schemaOf(ctx, db)
	if err != nil {
		// Any other failure (a full disk, on which even a reader cannot make the
		// -shm file) is the writer's open to meet and report as it does.
		return notDatabase(err, path)
	}
	if sc.version > SchemaVersion { // as migrate says it, but before the lock file is made
		return fmt.Errorf("eventlog/sqlite: %s has schema version %d, this build knows up to %d: run a newer build", path, sc.version, SchemaVersion)
	}
	return checkTables(sc, path)
}
