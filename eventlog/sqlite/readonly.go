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
)

// openReadOnly opens the event log in cfg.Dir for reading only (Config.ReadOnly). It
// takes no lock, creates nothing, starts no goroutines and never writes the
// database file: its connections open it with mode=ro and run with query_only.
// SQLite's WAL readers still share the -shm file (the wal-index) with the writer,
// and create it if it is missing, so that a WAL left by a writer that is gone is read too.
func openReadOnly(ctx context.Context, cfg Config) (_ *Log, err error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: data directory %s: %w", cfg.Dir, err)
	}
	path := filepath.Join(dir, dbFile)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w in %s: the data directory does not exist", ErrNoLog, dir)
		}
		return nil, fmt.Errorf("eventlog/sqlite: data directory %s: %w", dir, err)
	}
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w in %s: %s does not exist", ErrNoLog, dir, dbFile)
		}
		return nil, fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
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
	u := dsn(path, busy, "query_only(1)")
	u += "&mode=ro" // SQLite's own URI parameter: the database file is opened O_RDONLY
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
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("eventlog/sqlite: open %s read-only: read schema version: %w", path, err)
	}
	switch {
	case v == 0:
		return fmt.Errorf("%w in %s: %s holds no schema yet", ErrNoLog, dir, dbFile)
	case v < SchemaVersion:
		return fmt.Errorf("eventlog/sqlite: %s has schema version %d, this build reads %d: open it once with a node (not read-only) to migrate it",
			path, v, SchemaVersion)
	case v > SchemaVersion:
		return fmt.Errorf("eventlog/sqlite: %s has schema version %d, this build knows up to %d: this build is too old, run a newer one",
			path, v, SchemaVersion)
	}
	return nil
}
