package main

import (
	"context"
	"fmt"
	"os"

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
}

// open opens the log. A read-only embedded log takes no lock, so it can be read while
// a node serves from the same directory.
func (s store) open(ctx context.Context, readOnly bool) (eventlog.Log, error) {
	if s.clickhouse != "" {
		db := s.database
		if db == "" {
			db = "troupe"
		}
		l, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(s.clickhouse), Database: db})
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
	return sqlite.Open(ctx, sqlite.Config{Dir: s.data, ReadOnly: readOnly})
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
