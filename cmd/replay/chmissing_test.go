package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
)

// A ClickHouse database that does not exist (a misspelt
// TROUPE_CLICKHOUSE_DATABASE), or one that holds no event log, is an error of the
// commands that read a log and of fork, which names it and the server and creates
// nothing. Before, each of them created the database and the log's tables in it,
// and list answered with an empty list. import still creates the log, and says so.
// Needs TROUPE_TEST_CLICKHOUSE (host:port of a real server; .ci/run starts one).
func TestReplayRefusesAClickHouseDatabaseWithoutALog(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	defer func(w time.Duration) { clickhouseOpenWait = w }(clickhouseOpenWait)
	clickhouseOpenWait = time.Second
	ctx := context.Background()
	conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr), Protocol: ch.Native})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exists := func(db string) bool {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	tables := func(db string) uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	commands := [][]string{
		{"list"}, {"show", "s-1"}, {"show", "s-1", "--json"}, {"verify", "s-1"},
		{"export", "s-1"}, {"stats"}, {"fork", "s-1", "--at", "1"},
	}

	missing := chtest.Database(t, addr, "troupe_replay_typo_") // dropped at the end, should a command create it
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", missing)
	for _, c := range commands {
		code, out, errs := replay(t, append(c, "--clickhouse", addr)...)
		if code != 1 || out != "" || !strings.Contains(errs, `database "`+missing+`" does not exist on `+addr) {
			t.Errorf("%s of a database that does not exist: exit %d, stdout %q, stderr %q", c, code, out, errs)
		}
		if exists(missing) {
			t.Fatalf("%s created the database %s", c, missing)
		}
	}

	// A database that exists but holds no log (another program's) gets no tables.
	empty := chtest.Database(t, addr, "troupe_replay_other_")
	if err := conn.Exec(ctx, "CREATE DATABASE "+empty); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", empty)
	for _, c := range commands {
		code, out, errs := replay(t, append(c, "--clickhouse", addr)...)
		if code != 1 || out != "" || !strings.Contains(errs, `database "`+empty+`" on `+addr+" holds no event log") {
			t.Errorf("%s of a database without a log: exit %d, stdout %q, stderr %q", c, code, out, errs)
		}
		if n := tables(empty); n != 0 {
			t.Fatalf("%s created %d tables in the database %s", c, n, empty)
		}
	}

	// import writes a session into a log, and creates the log as a node would.
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	file := t.TempDir() + "/s.jsonl"
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", missing)
	code, _, errs := replay(t, "import", file, "--clickhouse", addr)
	if code != 0 || !strings.Contains(errs, "creating the event log in ClickHouse database "+missing) {
		t.Fatalf("import into a database that does not exist: exit %d, stderr %q", code, errs)
	}
	if code, out, errs := replay(t, "list", "--clickhouse", addr); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("list after the import: exit %d\n%s\n%s", code, out, errs)
	}
}
