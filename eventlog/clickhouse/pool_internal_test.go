package clickhouse

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
)

// TestExhaustedPoolSaysWhatToRaise: a request that finds every connection of
// the pool busy for DialTimeout fails with an error that names the setting to
// raise, and is still clickhouse-go's ErrAcquireConnTimeout.
func TestExhaustedPoolSaysWhatToRaise(t *testing.T) {
	addr, db := fencingDatabase(t, "pool")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := Open(ctx, Config{Addr: addr, Database: db, MaxOpenConns: 1, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	// Rows not read to their end hold the pool's one connection.
	rows, err := l.conn.Query(ctx, "SELECT number FROM system.numbers LIMIT 100000000")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()

	_, readErr := l.Read(ctx, "s", 1)
	_, statsErr := l.Report(ctx, eventlog.StatsFilter{})
	_, listErr := l.Sessions(ctx, eventlog.Filter{})
	for what, err := range map[string]error{"Read": readErr, "Report": statsErr, "Sessions": listErr} {
		if !errors.Is(err, ch.ErrAcquireConnTimeout) {
			t.Errorf("%s with the pool's connection busy: %v; want ErrAcquireConnTimeout", what, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "all 1 connections to ClickHouse were busy") || !strings.Contains(msg, "clickhouse_max_conns") {
			t.Errorf("%s with the pool's connection busy: %q; want it to say that the 1 connection was busy and what to raise", what, msg)
		}
	}
}
