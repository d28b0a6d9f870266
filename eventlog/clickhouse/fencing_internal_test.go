package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestFencedWhileWriting plays the race window of fencing on ClickHouse: node a's
// batch passes the lease check, then node b takes the partition and folds the
// session, then a's INSERT lands. a is told ErrFenced (it must not go on as if the
// batch were part of the session), b appends its own event at the same seq, and
// Read returns b's history only.
func TestFencedWhileWriting(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to 127.0.0.1:9000")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := fmt.Sprintf("troupe_test_fence_%d", time.Now().UnixNano())
	l, err := Open(ctx, Config{Addr: SplitAddr(addr), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		conn, err := ch.Open(&ch.Options{Addr: SplitAddr(addr), Protocol: ch.Native})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			_ = conn.Close()
		}
	})
	event := func(seq uint64, who string) messages.Envelope {
		e, err := messages.NewEnvelope(&messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "clock", Result: who})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("s/%d", seq), "s", seq, int64(seq), "tool/clock"
		return e
	}
	ea, err := l.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	first := event(1, "a")
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{first}); err != nil {
		t.Fatal(err)
	}

	var (
		once    sync.Once
		eb      uint64
		folded  []messages.Envelope
		hookErr error
	)
	l.beforeInsert = func() {
		once.Do(func() {
			if eb, hookErr = l.Own(ctx, "b", []int{1}); hookErr == nil {
				folded, hookErr = l.Read(ctx, "s", 1)
			}
		})
	}
	err = l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{event(2, "a")})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("AppendLeased of a batch whose partition was taken during its INSERT = %v, want ErrFenced", err)
	}
	if !reflect.DeepEqual(folded, []messages.Envelope{first}) {
		t.Fatalf("node b folded %d events, want the first one", len(folded))
	}
	mine := event(2, "b")
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{mine}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "s", 1)
	if err != nil || !reflect.DeepEqual(got, []messages.Envelope{first, mine}) {
		t.Fatalf("Read = %d events, %v; want node a's first event and node b's second", len(got), err)
	}
	var rows uint64
	if err := l.conn.QueryRow(ctx, "SELECT count() FROM events WHERE session_id = 's' AND seq = 2").Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("seq 2 holds %d rows (%v); want node a's stale row beside node b's", rows, err)
	}
}
