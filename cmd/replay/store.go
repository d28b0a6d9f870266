package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// store names the event log a command works on: the embedded log in a data
// directory, or ClickHouse when an address is given.
type store struct {
	data       string
	clickhouse string
	database   string
	// notices, when set, is told of a migration open made.
	notices io.Writer
}

// clickhouseOpenWait is how long a command retries a ClickHouse it cannot reach (a
// server restarting) before it fails with the reason: a typo'd address or a server
// that is down is an error, not a wait until the user interrupts it.
var clickhouseOpenWait = 30 * time.Second

// access is what a command does with the log it opens.
type access int

const (
	// reading: list, show, verify, export and stats read the log, and create
	// nothing: a log that does not exist (a misspelt --data or ClickHouse
	// database) is an error naming it, not an empty log made for it.
	reading access = iota
	// forking: fork writes a new session into the log that holds its parent, so
	// the log must exist too.
	forking
	// importing: import writes a session into a log, which it creates when there
	// is none yet, as a node does at its start (and says so).
	importing
)

// open opens the log for a. A read-only embedded log takes no lock, so it can be
// read while a node serves from the same directory. A read-only ClickHouse log
// leaves the repair of compacted streams' summaries to the nodes (NoSummaryRepair).
func (s store) open(ctx context.Context, a access) (eventlog.Log, error) {
	readOnly := a == reading
	if s.clickhouse != "" {
		db := s.database
		if db == "" {
			db = "troupe"
		}
		cfg := clickhouse.Config{Addr: clickhouse.SplitAddr(s.clickhouse), Database: db, NoSummaryRepair: readOnly, OpenWait: clickhouseOpenWait, MustExist: true}
		l, err := clickhouse.Open(ctx, cfg)
		if a == importing && errors.Is(err, clickhouse.ErrNoLog) {
			if s.notices != nil {
				fmt.Fprintf(s.notices, "creating the event log in ClickHouse database %s on %s (there was none)\n", db, s.clickhouse)
			}
			cfg.MustExist = false
			l, err = clickhouse.Open(ctx, cfg)
		}
		if errors.Is(err, clickhouse.ErrNoLog) {
			// The error names the database and the server already.
			return nil, fmt.Errorf("%w (TROUPE_CLICKHOUSE_DATABASE names the database, default troupe; a node creates it when it starts)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("clickhouse %s: %w", s.clickhouse, err)
		}
		return l, nil
	}
	if readOnly {
		if err := s.checkDir(); err != nil {
			return nil, err
		}
	}
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: s.data, ReadOnly: readOnly})
	if readOnly && errors.Is(err, sqlite.ErrOldSchema) {
		// A log of an older build: migrate it, as a node of this build would when it
		// starts, unless a node holds it (or it cannot be written), then read it.
		return s.migrateThenRead(ctx, err)
	}
	return l, err
}

// migrateThenRead migrates the embedded log in s.data to this build's schema by
// opening it for writing, closes it, and opens it read-only. old is the error of
// the read-only open, returned with the reason when the log cannot be migrated
// here (a node holds the directory, or it is not writable).
func (s store) migrateThenRead(ctx context.Context, old error) (eventlog.Log, error) {
	w, err := sqlite.Open(ctx, sqlite.Config{Dir: s.data})
	if err != nil {
		return nil, fmt.Errorf("%w; replay could not migrate it itself: %v", old, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("migrating the event log in %s: %w", s.data, err)
	}
	if s.notices != nil {
		fmt.Fprintf(s.notices, "migrated the event log in %s to schema %d (an older build wrote it)\n", s.data, sqlite.SchemaVersion)
	}
	return sqlite.Open(ctx, sqlite.Config{Dir: s.data, ReadOnly: true})
}

// hasSession returns an error unless the log, opened read-only, holds session id.
func (s store) hasSession(ctx context.Context, id string) (err error) {
	l, err := s.open(ctx, reading)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	return sessionExists(ctx, l, id)
}

// checkDir makes sure the data directory exists and is a directory.
func (s store) checkDir() error {
	fi, err := os.Stat(s.data)
	switch {
	case err != nil:
		return fmt.Errorf("no event log at %s (use --data DIR or --clickhouse HOST:PORT)", s.data)
	case !fi.IsDir():
		return fmt.Errorf("no event log at %s: it is a file, not a directory (--data names the data directory that holds events.db)", s.data)
	}
	return nil
}

// writeLocked rewrites the error of opening the embedded log for writing when a
// node holds its directory: the event log's own message speaks to Go callers
// (Config.Shared), not to a user of replay.
func (s store) writeLocked(err error) error {
	if s.clickhouse == "" && errors.Is(err, eventlog.ErrLocked) {
		return fmt.Errorf("%w: a running node holds %s; fork and import write the log, so stop the nodes that serve it first (list, show, verify and export read it while they run)",
			eventlog.ErrLocked, s.data)
	}
	return err
}
