package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Errors of the read-only mode.
var (
	// ErrNoLog means a read-only Open found no event log: the data directory or its
	// database is missing, or the database holds no schema yet.
	ErrNoLog = errors.New("eventlog/sqlite: no event log")
	// ErrReadOnly means Append was called on a Log opened with Config.ReadOnly.
	ErrReadOnly = errors.New("eventlog/sqlite: log is opened read-only")
	// ErrOldSchema means a read-only Open found a log of an older schema, which only
	// an Open without Config.ReadOnly migrates.
	ErrOldSchema = errors.New("schema older than this build reads")
)

// openReadOnly opens the event log in cfg.Dir for reading only (Config.ReadOnly). It
// takes no lock, creates nothing, starts no goroutines and never writes the
// database file: its connections open it with mode=ro and run with query_only.
// SQLite's WAL readers still share the -shm file (the wal-index) with the writer,
// and create it if it is missing, so that a WAL left by a writer that is gone is read too.
// Where the -shm file is missing and cannot be created (a read-only copy or mount),
// the database is opened immutable instead, when that loses nothing: see readOnlyCopy.
func openReadOnly(ctx context.Context, cfg Config) (_ *Log, err error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: data directory %s: %w", cfg.Dir, err)
	}
	path := filepath.Join(dir, dbFile)
	if fi, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w in %s: the data directory does not exist", ErrNoLog, dir)
		}
		return nil, fmt.Errorf("eventlog/sqlite: data directory %s: %w", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w in %s: it is a file, not a data directory", ErrNoLog, dir)
	}
	if fi, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w in %s: %s does not exist", ErrNoLog, dir, dbFile)
		}
		return nil, fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
	} else if err := regularFile(fi, path); err != nil {
		return nil, err
	}

	l := &Log{
		cfg:     cfg,
		path:    path,
		closing: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.release())
		}
	}()
	busy := fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds())
	immutable, err := readOnlyCopy(dir, path)
	if err != nil {
		return nil, err
	}
	u := dsn(path, busy, "query_only(1)")
	u += "&mode=ro" // SQLite's own URI parameter: the database file is opened O_RDONLY
	if immutable {
		u += "&immutable=1" // no locks, no -shm, no -wal: the file is all there is
	}
	if l.rdb, err = sql.Open("sqlite", u); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open %s read-only: %w", path, err)
	}
	l.rdb.SetMaxOpenConns(cfg.ReadConns)
	l.rdb.SetMaxIdleConns(cfg.ReadConns)
	if err := checkSchema(ctx, l.rdb, dir, path); err != nil {
		return nil, err
	}
	if err := l.prepareReads(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// checkSchema makes sure the database at path holds the schema this build reads. A
// read-only Log cannot migrate, so an older schema is an error too.
func checkSchema(ctx context.Context, db *sql.DB, dir, path string) error {
	sc, err := schemaOf(ctx, db)
	if err != nil {
		if nd := notDatabase(err, path); nd != nil {
			return nd
		}
		return fmt.Errorf("eventlog/sqlite: open %s read-only: read schema version: %w", path, err)
	}
	// Another program's database is no log to read, nor one to migrate (which
	// replay does for a log of an older schema).
	if err := checkTables(sc, path); err != nil {
		return err
	}
	switch v := sc.version; {
	case v == 0:
		return fmt.Errorf("%w in %s: %s holds no schema yet", ErrNoLog, dir, dbFile)
	case v < SchemaVersion:
		return fmt.Errorf("eventlog/sqlite: %s: %w (version %d, this build reads %d): open it once with a node (not read-only) to migrate it",
			path, ErrOldSchema, v, SchemaVersion)
	case v > SchemaVersion:
		return fmt.Errorf("eventlog/sqlite: %s has schema version %d, this build knows up to %d: this build is too old, run a newer one",
			path, v, SchemaVersion)
	}
	return nil
}

// readOnlyCopy reports whether the database at path is to be opened immutable. A WAL
// reader needs the -shm file beside the database and creates it when it is missing;
// where it cannot (the directory is not writable: a read-only copy of a log, a
// read-only mount), SQLite fails with "attempt to write a readonly database".
// Opened immutable, SQLite uses neither -shm nor -wal nor locks and reads the
// database file alone, which is then the whole log when no -wal file holds commits
// and no node holds the directory. Otherwise readOnlyCopy says why the log cannot be read.
func readOnlyCopy(dir, path string) (bool, error) {
	if _, err := os.Lstat(path + "-shm"); !errors.Is(err, os.ErrNotExist) {
		return false, nil // there (or unknown): SQLite uses it
	}
	if dirWritable(dir) {
		return false, nil // SQLite creates it
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return false, fmt.Errorf("eventlog/sqlite: cannot read %s: %s-wal holds commits not yet in the database, and reading them "+
			"needs %s-shm, which is missing and cannot be created in the read-only directory %s: copy the log with its -wal and -shm "+
			"files, or read it where its directory is writable", path, dbFile, dbFile, dir)
	}
	if lockHeld(dir) {
		return false, fmt.Errorf("eventlog/sqlite: cannot read %s: a node holds %s, but %s-shm, through which it shares its "+
			"commits with readers, is missing and cannot be created in the read-only directory", path, dir, dbFile)
	}
	return true, nil
}
