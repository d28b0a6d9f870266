package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestTakeoverLeavesNoEndedSessionRunning: node a records a session's second task
// while Kafka moves the session's partition to node b, in the race window of
// fencing: a's task lands at seq 3 after b read the session, and a is told
// ErrFenced. b finishes the first task (seq 3 and 4), reads the second task again
// from the bus, records it at seq 5 and ends it (cancelled, seq 6). Every task the
// session has is ended, and Read says so; the listing must say so too: the session
// is failed (its latest task's status), not running, in the general listing, in
// the running one (that of every node start and partition assignment, which would
// resume it each time) and in the failed one.
func TestTakeoverLeavesNoEndedSessionRunning(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to 127.0.0.1:9000")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := fmt.Sprintf("troupe_test_takeover_%d", time.Now().UnixNano())
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
	event := func(seq uint64, task string, p messages.Payload) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor, e.CorrelationID = fmt.Sprintf("s/%d", seq), "s", seq, 1_767_225_600_000_000+int64(seq), "session", task
		if e.Type == messages.TypeTaskSubmitted {
			e.ID = task
		}
		return e
	}
	ea, err := l.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		event(1, "t1", &messages.TaskSubmitted{Input: "x"}),
		event(2, "t1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
	}); err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		eb      uint64
		hookErr error
	)
	l.beforeInsert = func() {
		once.Do(func() {
			if eb, hookErr = l.Own(ctx, "b", []int{1}); hookErr == nil {
				_, hookErr = l.Read(ctx, "s", 1)
			}
		})
	}
	err = l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{event(3, "t2", &messages.TaskSubmitted{Input: "y"})})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("node a's task written while b took the partition: %v, want ErrFenced", err)
	}
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{
		event(3, "t1", &messages.ModelResponded{Key: "s/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}),
		event(4, "t1", &messages.TaskCompleted{Output: "done"}),
		event(5, "t2", &messages.TaskSubmitted{Input: "y"}),
		event(6, "t2", &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "cancelled by request"}),
	}); err != nil {
		t.Fatal(err)
	}
	events, err := l.Read(ctx, "s", 1)
	if err != nil || len(events) != 6 || events[2].Type != messages.TypeModelResponded {
		t.Fatalf("Read = %d events (%v); want node b's history of 6", len(events), err)
	}

	status := func(f eventlog.Filter) (string, bool) {
		t.Helper()
		infos, err := l.Sessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range infos {
			if i.ID == "s" {
				return i.Status, true
			}
		}
		return "", false
	}
	if s, ok := status(eventlog.Filter{}); s != messages.StatusFailed {
		t.Errorf("the general listing has the session %q (listed: %v); want failed", s, ok)
	}
	if _, ok := status(eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true}); ok {
		t.Error("the running sessions' listing has the ended session")
	}
	if _, ok := status(eventlog.Filter{Status: messages.StatusRunning}); ok {
		t.Error("the general listing of running sessions has the ended session")
	}
	if s, ok := status(eventlog.Filter{Status: messages.StatusFailed}); !ok || s != messages.StatusFailed {
		t.Errorf("the listing of failed sessions: %q, %v; want the session, failed", s, ok)
	}
}
