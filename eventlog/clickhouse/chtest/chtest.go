// Package chtest helps tests that use a real ClickHouse server: a database of
// the test's own, dropped when the test ends, so that runs leave none behind.
package chtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
)

// Database returns the name of a new database, prefix and random hex, on the
// ClickHouse server at addr (host:port[,host:port]), dropped with what it holds
// when t ends. The log creates it at Open.
func Database(t testing.TB, addr, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := prefix + hex.EncodeToString(b)
	t.Cleanup(func() {
		conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr), Protocol: ch.Native})
		if err != nil {
			t.Logf("drop database %s: %v", db, err)
			return
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Logf("drop database %s: %v", db, err)
		}
	})
	return db
}
