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

// fencingDatabase returns the test server's address and a database name of the
// test's own, dropped when the test ends; it skips the test without a server.
func fencingDatabase(t *testing.T, prefix string) ([]string, string) {
	t.Helper()
	v := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if v == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to 127.0.0.1:9000")
	}
	addr := SplitAddr(v)
	db := fmt.Sprintf("troupe_test_%s_%d", prefix, time.Now().UnixNano())
	t.Cleanup(func() {
		conn, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			_ = conn.Close()
		}
	})
	return addr, db
}

// openNodes opens one Log per node on database db, as the nodes of a cluster each
// have theirs; they are closed when the test ends.
func openNodes(t *testing.T, ctx context.Context, addr []string, db string, n int) []*Log {
	t.Helper()
	logs := make([]*Log, n)
	for i := range logs {
		l, err := Open(ctx, Config{Addr: addr, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		logs[i] = l
	}
	return logs
}

// sessionEvent is event seq of session s as a session actor writes it: ID
// "s/<seq>", the task's ID ("s/1" unless task says otherwise) as correlation ID.
func sessionEvent(t *testing.T, seq uint64, task string, p messages.Payload) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor, e.CorrelationID = fmt.Sprintf("s/%d", seq), "s", seq, 1_767_225_600_000_000+int64(seq), "session", task
	return e
}

// listed returns the status session s is listed with under f, and whether it is.
func listed(t *testing.T, ctx context.Context, l *Log, f eventlog.Filter) (string, bool) {
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

var runningOnly = eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true}

// staleEndScenario plays, on database db, a stale owner's task.failed landing
// after the session's new owner took the partition: node a records the start of
// a task (seq 1 and 2) under its epoch; a's task.failed (seq 3) passes the lease
// check, then node b takes the partition and reads the session (seq 1 and 2),
// then a's INSERT lands and a is told ErrFenced. b goes on (its seq 3). The
// session is b's and running: Read says so, and so must the listings, the running
// one above all (every node start and partition assignment resumes what it
// lists): node b then dies, and node c, taking the partition, must find the
// session among the running ones and resume it.
func staleEndScenario(t *testing.T, ctx context.Context, addr []string, db string) {
	nodes := openNodes(t, ctx, addr, db, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ea, err := a.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x"}),
		sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
	}); err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		eb      uint64
		folded  []messages.Envelope
		hookErr error
	)
	a.beforeInsert = func() {
		once.Do(func() {
			if eb, hookErr = b.Own(ctx, "b", []int{1}); hookErr == nil {
				folded, hookErr = b.Read(ctx, "s", 1)
			}
		})
	}
	err = a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		sessionEvent(t, 3, "s/1", &messages.TaskFailed{Reason: messages.ReasonModelError, Error: "deadline"}),
	})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) || len(folded) != 2 {
		t.Fatalf("node a's task.failed written while b took the partition: %v (b folded %d events), want ErrFenced", err, len(folded))
	}
	if err := b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{
		sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}}),
	}); err != nil {
		t.Fatal(err)
	}
	if s, ok := listed(t, ctx, b, eventlog.Filter{}); s != messages.StatusRunning {
		t.Errorf("the general listing has the session %q (listed: %v); want running", s, ok)
	}
	if _, ok := listed(t, ctx, b, eventlog.Filter{Status: messages.StatusFailed}); ok {
		t.Error("the listing of failed sessions has the session its new owner runs")
	}
	if s, ok := listed(t, ctx, b, eventlog.Filter{Status: messages.StatusRunning}); !ok || s != messages.StatusRunning {
		t.Errorf("the general listing of running sessions: %q, %v; want the session, running", s, ok)
	}

	// Node b dies; node c takes the partition and resumes what is listed running.
	ec, err := c.Own(ctx, "c", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := listed(t, ctx, c, runningOnly); !ok || s != messages.StatusRunning {
		t.Fatalf("node c's takeover does not list the session as running (%q, %v): it is never resumed", s, ok)
	}
	events, err := c.Read(ctx, "s", 1)
	if err != nil || len(events) != 3 || events[2].Type != messages.TypeModelResponded {
		t.Fatalf("node c reads %d events (%v); want node b's history of 3", len(events), err)
	}
	// c ends the task: the session is completed, and the running listing stops
	// reading it.
	if err := c.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ec}, []messages.Envelope{
		sessionEvent(t, 4, "s/1", &messages.TaskCompleted{Output: "z"}),
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := listed(t, ctx, c, runningOnly); ok {
		t.Error("the running listing has the session after its task ended")
	}
	if s, ok := listed(t, ctx, c, eventlog.Filter{}); s != messages.StatusCompleted {
		t.Errorf("the general listing has the session %q (listed: %v); want completed", s, ok)
	}
	var open uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM (SELECT seq, epoch, max(settled) AS s FROM fenced_events WHERE session_id = 's' GROUP BY seq, epoch) WHERE s = 0").Scan(&open); err != nil || open != 0 {
		t.Errorf("fenced_events holds %d rows of the ended session not settled (%v); want 0", open, err)
	}
}

// TestStaleEndLeavesSessionRunning: a stale owner's task.failed, written after the
// new owner took the partition, ends the session in the aggregates (summaries,
// open_tasks) but not in Read; the listings must follow Read.
func TestStaleEndLeavesSessionRunning(t *testing.T) {
	addr, db := fencingDatabase(t, "staleend")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	staleEndScenario(t, ctx, addr, db)
}

// TestMigrationListsFencedEvents: a database of schema 8, with a running session
// stored, is migrated to schema 9 by Open, keeps listing that session, and lists
// the session of staleEndScenario right.
func TestMigrationListsFencedEvents(t *testing.T) {
	addr, db := fencingDatabase(t, "fencedmigr")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	if err := raw.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	conn, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native, Auth: ch.Auth{Database: db}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:8] {
		if err := apply(ctx, conn, m); err != nil {
			t.Fatal(err)
		}
		if err := record(ctx, conn, m); err != nil {
			t.Fatal(err)
		}
	}
	old := sessionEvent(t, 1, "old/1", &messages.TaskSubmitted{Input: "x"})
	old.ID, old.SessionID = "old/1", "old"
	b, err := conn.PrepareBatch(ctx, "INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(old.SessionID, old.Seq, old.ID, string(old.Type), int64(old.Version), old.CausationID, old.CorrelationID, old.TS, old.Actor, string(old.Payload), uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}

	staleEndScenario(t, ctx, addr, db)
	var versions uint32
	if err := conn.QueryRow(ctx, "SELECT max(version) FROM schema_migrations").Scan(&versions); err != nil || versions != SchemaVersion {
		t.Fatalf("schema version %d (%v) after Open, want %d", versions, err, SchemaVersion)
	}
	l, err := Open(ctx, Config{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	infos, err := l.Sessions(ctx, runningOnly)
	if err != nil || len(infos) != 1 || infos[0].ID != "old" {
		t.Fatalf("running sessions after the migration: %+v (%v); want the stored one", infos, err)
	}
}

// TestStaleTaskLeavesSessionEnded: a stale owner's task.submitted, written past
// the new owner's last event after it took the partition, is hidden by Read; the
// session, whose tasks the new owner all ended, must list as completed, not
// running (every start and partition assignment would resume it). When the new
// owner records that task itself, the session runs again.
func TestStaleTaskLeavesSessionEnded(t *testing.T) {
	addr, db := fencingDatabase(t, "staletask")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 2)
	a, b := nodes[0], nodes[1]
	ea, err := a.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x"}),
		sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
	}); err != nil {
		t.Fatal(err)
	}
	answer := sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}})
	end := sessionEvent(t, 4, "s/1", &messages.TaskCompleted{Output: "z"})
	second := sessionEvent(t, 5, "s/5", &messages.TaskSubmitted{Input: "y"})
	var (
		once    sync.Once
		eb      uint64
		hookErr error
	)
	a.beforeInsert = func() {
		once.Do(func() {
			if eb, hookErr = b.Own(ctx, "b", []int{1}); hookErr != nil {
				return
			}
			if _, hookErr = b.Read(ctx, "s", 1); hookErr == nil {
				hookErr = b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{answer, end})
			}
		})
	}
	// Node a's batch: the same end of the first task, and the second task.
	err = a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{answer, end, second})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("node a's batch written while b took the partition: %v, want ErrFenced", err)
	}
	events, err := b.Read(ctx, "s", 1)
	if err != nil || len(events) != 4 {
		t.Fatalf("Read = %d events (%v); want node b's history of 4", len(events), err)
	}
	if _, ok := listed(t, ctx, b, runningOnly); ok {
		t.Error("the running listing has the session whose tasks all ended")
	}
	if s, ok := listed(t, ctx, b, eventlog.Filter{}); s != messages.StatusCompleted {
		t.Errorf("the general listing has the session %q (listed: %v); want completed", s, ok)
	}
	if _, ok := listed(t, ctx, b, eventlog.Filter{Status: messages.StatusRunning}); ok {
		t.Error("the general listing of running sessions has the ended session")
	}
	if s, ok := listed(t, ctx, b, eventlog.Filter{Status: messages.StatusCompleted}); !ok || s != messages.StatusCompleted {
		t.Errorf("the listing of completed sessions: %q, %v; want the session", s, ok)
	}

	// b reads the second task from the bus and records it: running again.
	if err := b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{second}); err != nil {
		t.Fatal(err)
	}
	if s, ok := listed(t, ctx, b, runningOnly); !ok || s != messages.StatusRunning {
		t.Errorf("the running listing: %q, %v; want the session with its second task, running", s, ok)
	}
}

// fencedBatch has node a (epoch ea, returned) write seq 1 and 2 of session s, then
// batch while node b takes the partition (b's epoch returned) between a's lease
// check and its INSERT; a must be told ErrFenced.
func fencedBatch(t *testing.T, ctx context.Context, a, b *Log, batch ...messages.Envelope) (ea, eb uint64) {
	t.Helper()
	ea, err := a.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x"}),
		sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
	}); err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		hookErr error
	)
	a.beforeInsert = func() { once.Do(func() { eb, hookErr = b.Own(ctx, "b", []int{1}) }) }
	err = a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, batch)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("node a's batch written while b took the partition: %v, want ErrFenced", err)
	}
	return ea, eb
}

// TestStaleEndBeforeTheNewOwnerWrites: node b took the partition and read the
// session (seq 1 and 2) before node a's stale task.failed (seq 3) landed, and
// died before it wrote anything. Node c, taking the partition, must list the
// session as running and fold what b folded, without a's task.failed: b never
// saw it, a was told it was not written, and nobody published it.
func TestStaleEndBeforeTheNewOwnerWrites(t *testing.T) {
	addr, db := fencingDatabase(t, "staleendtail")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	fencedBatch(t, ctx, a, b, sessionEvent(t, 3, "s/1", &messages.TaskFailed{Reason: messages.ReasonModelError, Error: "deadline"}))
	ec, err := c.Own(ctx, "c", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := listed(t, ctx, c, runningOnly); !ok || s != messages.StatusRunning {
		t.Fatalf("node c's takeover lists the session %q (listed: %v); want running", s, ok)
	}
	events, err := c.Read(ctx, "s", 1)
	if err != nil || len(events) != 2 {
		t.Fatalf("node c reads %d events (%v); want the 2 node b read", len(events), err)
	}
	// c resumes the task at seq 3: node a's row there is hidden for good.
	if err := c.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ec}, []messages.Envelope{
		sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}}),
	}); err != nil {
		t.Fatal(err)
	}
	events, err = c.Read(ctx, "s", 1)
	if err != nil || len(events) != 3 || events[2].Type != messages.TypeModelResponded {
		t.Fatalf("node c reads %d events (%v); want its history of 3", len(events), err)
	}
	if s, ok := listed(t, ctx, c, eventlog.Filter{}); s != messages.StatusRunning {
		t.Errorf("the general listing has the session %q (listed: %v); want running", s, ok)
	}
}

// TestFencedEventsAnOwnerWroteAfterStay: node b read node a's stale end of the
// first task (seq 3) after it landed, and wrote after it: a second task (seq 4),
// which it completed (seq 5). a's event is part of the history b folded: Read and
// the listings keep it, and the session is completed, not running.
func TestFencedEventsAnOwnerWroteAfterStay(t *testing.T) {
	addr, db := fencingDatabase(t, "fencedstay")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 2)
	a, b := nodes[0], nodes[1]
	_, eb := fencedBatch(t, ctx, a, b, sessionEvent(t, 3, "s/1", &messages.TaskCompleted{Output: "z"}))
	if err := b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{
		sessionEvent(t, 4, "s/4", &messages.TaskSubmitted{Input: "y"}),
		sessionEvent(t, 5, "s/4", &messages.TaskCompleted{Output: "w"}),
	}); err != nil {
		t.Fatal(err)
	}
	events, err := b.Read(ctx, "s", 1)
	if err != nil || len(events) != 5 {
		t.Fatalf("Read = %d events (%v); want 5, node a's third among them", len(events), err)
	}
	if _, ok := listed(t, ctx, b, runningOnly); ok {
		t.Error("the running listing has the completed session")
	}
	if s, ok := listed(t, ctx, b, eventlog.Filter{}); s != messages.StatusCompleted {
		t.Errorf("the general listing has the session %q (listed: %v); want completed", s, ok)
	}
}
