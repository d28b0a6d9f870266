package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// The replay commands against the ClickHouse event log, which a node writes to.
// Needs TROUPE_TEST_CLICKHOUSE (host:port of a real server; .ci/run starts one).
func TestReplayAgainstClickHouse(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	db := fmt.Sprintf("troupe_replay_test_%d", time.Now().UnixNano())
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", db)
	ctx := context.Background()
	log, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr)})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			_ = conn.Close()
		}
	})
	n, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodetest.Run(t, n, "ch-1", "What is 12 * (7 + 5)?")
	stop()
	_ = log.Close()

	code, out, errs := replay(t, "list", "--clickhouse", addr)
	if code != 0 || !strings.Contains(out, "ch-1") || !strings.Contains(out, "completed") {
		t.Fatalf("list: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "show", "ch-1", "--clickhouse", addr); code != 0 || !strings.Contains(out, "calculator → 144") {
		t.Fatalf("show: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "ch-1", "--clickhouse", addr); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "fork", "ch-1", "--at", "3", "--session", "ch-fork", "--clickhouse", addr); code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "stats", "--clickhouse", addr, "--json"); code != 0 || !strings.Contains(out, `"tool": "calculator"`) {
		t.Fatalf("stats: %d %s %s", code, out, errs)
	}
}

// The same sessions give the same figures from either log.
func TestStatsAgreeAcrossLogs(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	db := fmt.Sprintf("troupe_stats_test_%d", time.Now().UnixNano())
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", db)
	t.Cleanup(func() {
		conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr)})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			_ = conn.Close()
		}
	})
	dir := t.TempDir()
	src := t.TempDir()
	for _, in := range []string{"What is 12 * (7 + 5)?", "what is 1/0", "echo hi"} {
		id := recordSession(t, src, in)
		file := t.TempDir() + "/s.jsonl"
		if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
			t.Fatal(errs)
		}
		if code, _, errs := replay(t, "import", file, "--data", dir); code != 0 {
			t.Fatal(errs)
		}
		if code, _, errs := replay(t, "import", file, "--clickhouse", addr); code != 0 {
			t.Fatal(errs)
		}
	}
	_, fromSQLite, _ := replay(t, "stats", "--data", dir, "--json")
	_, fromClickHouse, errs := replay(t, "stats", "--clickhouse", addr, "--json")
	if fromSQLite != fromClickHouse {
		t.Fatalf("stats differ:\nSQLite:\n%s\nClickHouse:\n%s\n%s", fromSQLite, fromClickHouse, errs)
	}
}

// An export whose events were rewritten by another JSON tool (Python's
// json.dumps puts a space after each colon and comma) gives the same figures
// from either log once imported. ClickHouse's analytics read the payloads with
// visitParamExtract*, which finds no field whose value follows a space: the
// session's model calls counted under model "" with no tokens, and its tool
// call under tool "", until import stored each payload as a node writes it.
func TestStatsAgreeForAnExportWithSpaces(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	db := chtest.Database(t, addr, "troupe_stats_spaced_")
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", db)
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	file := t.TempDir() + "/s.jsonl"
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var spaced bytes.Buffer
	for line := range bytes.Lines(b) {
		var out bytes.Buffer
		if err := json.Indent(&out, bytes.TrimSpace(line), "", " "); err != nil {
			t.Fatal(err)
		}
		// One line again: Indent breaks lines only between tokens.
		spaced.Write(bytes.ReplaceAll(out.Bytes(), []byte("\n"), nil))
		spaced.WriteByte('\n')
	}
	if !bytes.Contains(spaced.Bytes(), []byte(`"model": "`)) {
		t.Fatalf("the rewritten export has no spaced model field:\n%s", spaced.Bytes())
	}
	if err := os.WriteFile(file, spaced.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := replay(t, "import", file, "--clickhouse", addr); code != 0 {
		t.Fatal(errs)
	}
	_, fromSQLite, _ := replay(t, "stats", "--data", dir, "--json")
	_, fromClickHouse, errs := replay(t, "stats", "--clickhouse", addr, "--json")
	if !strings.Contains(fromSQLite, `"tool": "calculator"`) {
		t.Fatalf("stats of the SQLite log name no calculator: the session is not what the test means:\n%s", fromSQLite)
	}
	if fromSQLite != fromClickHouse {
		t.Fatalf("stats differ:\nSQLite:\n%s\nClickHouse:\n%s\n%s", fromSQLite, fromClickHouse, errs)
	}
}

// replay fork on the ClickHouse log a node serves (without Kafka, so it owns the
// log) writes its fork beside the node: the node stays healthy and takes tasks.
// Before, fork's node took the log's next ownership epoch, and the serving node
// refused every task and write (503) from then on, until it was restarted.
func TestForkBesideServingNodeOnClickHouse(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	db := chtest.Database(t, addr, "troupe_replay_fork_")
	t.Setenv("TROUPE_CLICKHOUSE_DATABASE", db)
	ctx := context.Background()
	log, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	n := nodetest.Start(t, node.Config{Log: log})
	nodetest.Run(t, n, "served-1", "What is 12 * (7 + 5)?")

	if code, out, errs := replay(t, "fork", "served-1", "--at", "3", "--session", "served-fork", "--clickhouse", addr); code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d %s %s", code, out, errs)
	}
	if err := n.Healthy(); err != nil {
		t.Errorf("the serving node, after replay fork wrote beside it: %v", err)
	}
	nodetest.Run(t, n, "served-2", "What is 2 + 2?") // fails the test if the task is refused
}
