package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// analytics is what Report and the analytics views of the README say of the log,
// as one comparable string.
func analytics(t *testing.T, ctx context.Context, l *Log) string {
	t.Helper()
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	report, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"Report " + string(report)}
	for _, q := range []string{
		"SELECT concat(toString(count()), ' calls ', toString(sum(calls)), ' prompt ', toString(sum(prompt_tokens)), ' cost ', toString(sum(cost_usd))) FROM model_usage",
		"SELECT concat(toString(count()), ' calls ', toString(sum(calls)), ' errors ', toString(sum(errors))) FROM tool_usage",
		"SELECT concat(toString(count()), ' sessions ', toString(sum(sessions)), ' completed ', toString(sum(completed)), ' running ', toString(sum(running)), ' steps ', toString(sum(avg_steps))) FROM session_outcomes",
		"SELECT concat(toString(count()), ' operations ', toString(sum(operations))) FROM memory_ops",
		"SELECT concat(toString(count()), ' agents ', arrayStringConcat(groupArray(agent), ',')) FROM session_agents",
	} {
		var s string
		if err := l.conn.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// staleBatch is what node a writes under its lease of partition 1 while node b
// takes the partition (between a's lease check and its INSERT): the end of
// session s's task (a model's answer, a tool's result, a memory, the task's
// completion) and the first task of a new session t.
func staleBatch(t *testing.T) []messages.Envelope {
	t.Helper()
	other := sessionEvent(t, 1, "t/1", &messages.TaskSubmitted{Input: "y", Agent: "ghost"})
	other.ID, other.SessionID = "t/1", "t"
	return []messages.Envelope{
		sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"},
			Usage:   messages.Usage{PromptTokens: 1000, CompletionTokens: 100, CostUSD: 0.5}}),
		sessionEvent(t, 4, "s/1", &messages.ToolCallCompleted{Key: "s/4", CallID: "c", Tool: "stale", Result: "r", LatencyUS: 7}),
		sessionEvent(t, 5, "s/1", &messages.MemoryAdded{Reason: "stale", Memory: messages.MemoryRecord{MemoryID: "m", Tier: "episodic", Content: "x"}}),
		sessionEvent(t, 6, "s/1", &messages.TaskCompleted{Output: "z"}),
		other,
	}
}

// startSession has node a take partition 1 and record the start of session s's
// task (seq 1 and 2); it returns a's epoch.
func startSession(t *testing.T, ctx context.Context, a *Log) uint64 {
	t.Helper()
	ea, err := a.Own(ctx, "a", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x", Agent: "planner"}),
		sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
	}); err != nil {
		t.Fatal(err)
	}
	return ea
}

// TestFencedBatchLeavesAnalyticsAlone: a stale owner's batch, fenced (written
// after node b took the partition), changes neither Report nor the analytics
// views the README documents; node b's own events at the same seqs count.
func TestFencedBatchLeavesAnalyticsAlone(t *testing.T) {
	addr, db := fencingDatabase(t, "fencedstats")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 2)
	a, b := nodes[0], nodes[1]
	ea := startSession(t, ctx, a)
	before := analytics(t, ctx, b)

	var (
		once    sync.Once
		eb      uint64
		hookErr error
	)
	a.beforeInsert = func() { once.Do(func() { eb, hookErr = b.Own(ctx, "b", []int{1}) }) }
	err := a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, staleBatch(t))
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("node a's batch written while b took the partition: %v, want ErrFenced", err)
	}
	if after := analytics(t, ctx, b); after != before {
		t.Errorf("a fenced batch changed the analytics:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Node b answers the model itself at seq 3 and completes the task: its events count.
	if err := b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{
		sessionEvent(t, 3, "s/1", &messages.ToolCallCompleted{Key: "s/3", CallID: "c", Tool: "clock", Result: "noon", LatencyUS: 5}),
		sessionEvent(t, 4, "s/1", &messages.TaskCompleted{Output: "noon"}),
	}); err != nil {
		t.Fatal(err)
	}
	st, err := b.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Models) != 0 || len(st.Memory) != 0 || len(st.Tools) != 1 || st.Tools[0].Tool != "clock" || st.Tools[0].Calls != 1 ||
		len(st.Sessions) != 1 || st.Sessions[0].Agent != "planner" || st.Sessions[0].Sessions != 1 || st.Sessions[0].Completed != 1 {
		t.Errorf("Report after node b's events = %+v; want node b's tool call and its completed session only", st)
	}
	var tools, completed, sessions uint64
	if err := b.conn.QueryRow(ctx, "SELECT (SELECT sum(calls) FROM tool_usage WHERE tool = 'clock'), (SELECT sum(completed) FROM session_outcomes), (SELECT sum(sessions) FROM session_outcomes)").
		Scan(&tools, &completed, &sessions); err != nil || tools != 1 || completed != 1 || sessions != 1 {
		t.Errorf("views after node b's events: %d clock calls, %d of %d sessions completed (%v); want 1, 1 of 1", tools, completed, sessions, err)
	}
}

// TestStaleRowsOfAWriterThatDied: node a's batch passes its lease check, node b
// takes the partition, a's INSERT lands, and a dies before it can confirm its
// lease (it never learns that it was fenced, and lists nothing). Its rows must
// still count for nothing: Read, the listings, Report and the analytics views
// ignore them, and node c, taking the partition after b, folds the session
// without them.
func TestStaleRowsOfAWriterThatDied(t *testing.T) {
	addr, db := fencingDatabase(t, "staledied")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ea := startSession(t, ctx, a)
	before := analytics(t, ctx, b)

	var (
		ownOnce, dieOnce sync.Once
		hookErr          error
		inserted         = make(chan struct{})
		revive           = make(chan struct{})
		revived          sync.Once
	)
	wake := func() { revived.Do(func() { close(revive) }) }
	t.Cleanup(wake) // before the nodes are closed (cleanups run last first)
	a.beforeInsert = func() { ownOnce.Do(func() { _, hookErr = b.Own(ctx, "b", []int{1}) }) }
	a.beforeConfirm = func() {
		dieOnce.Do(func() {
			close(inserted)
			<-revive // node a is gone: nothing of it runs until the test is over
		})
	}
	result := make(chan error, 1)
	go func() { result <- a.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ea}, staleBatch(t)) }()
	select {
	case <-inserted:
	case err := <-result:
		t.Fatalf("node a's batch: %v before its INSERT", err)
	case <-ctx.Done():
		t.Fatal("node a's INSERT did not happen")
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}

	for _, l := range []*Log{b, c} {
		if events, err := l.Read(ctx, "s", 1); err != nil || len(events) != 2 {
			t.Errorf("Read = %d events (%v); want the 2 node a wrote while it owned the partition", len(events), err)
		}
		if events, err := l.Read(ctx, "t", 1); err != nil || len(events) != 0 {
			t.Errorf("Read of the session node a started when stale = %d events (%v); want none", len(events), err)
		}
	}
	if s, ok := listed(t, ctx, c, runningOnly); !ok || s != messages.StatusRunning {
		t.Errorf("the running listing has the session %q (listed: %v); want running", s, ok)
	}
	if s, ok := listed(t, ctx, c, eventlog.Filter{}); s != messages.StatusRunning {
		t.Errorf("the general listing has the session %q (listed: %v); want running", s, ok)
	}
	if _, ok := listed(t, ctx, c, eventlog.Filter{Status: messages.StatusCompleted}); ok {
		t.Error("the listing of completed sessions has the session node a completed when stale")
	}
	infos, err := c.Sessions(ctx, runningOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.ID == "t" {
			t.Error("the running listing has the session node a started when stale")
		}
	}
	if after := analytics(t, ctx, c); after != before {
		t.Errorf("the dead writer's batch changed the analytics:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Node b dies too; node c takes the partition, folds the session and goes on.
	ec, err := c.Own(ctx, "c", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.Read(ctx, "s", 1)
	if err != nil || len(events) != 2 {
		t.Fatalf("node c folds %d events (%v); want 2", len(events), err)
	}
	answer := sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "c"}})
	if err := c.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ec}, []messages.Envelope{answer}); err != nil {
		t.Fatal(err)
	}
	if events, err = c.Read(ctx, "s", 1); err != nil || len(events) != 3 || string(events[2].Payload) != string(answer.Payload) {
		t.Fatalf("node c reads %d events (%v); want its history of 3", len(events), err)
	}
	if s, ok := listed(t, ctx, c, eventlog.Filter{}); s != messages.StatusRunning {
		t.Errorf("the general listing has the session %q (listed: %v); want running", s, ok)
	}
	// Node c records session t's task, which node a never confirmed (nor
	// committed on the bus): its own event at seq 1 is the session's.
	task := sessionEvent(t, 1, "t/1", &messages.TaskSubmitted{Input: "y", Agent: "ghost"})
	task.ID, task.SessionID, task.Actor = "t/1", "t", "c"
	if err := c.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: ec}, []messages.Envelope{task}); err != nil {
		t.Fatal(err)
	}
	if events, err := c.Read(ctx, "t", 1); err != nil || len(events) != 1 || events[0].Actor != "c" {
		t.Fatalf("Read of session t = %+v (%v); want node c's task", events, err)
	}

	// Node a wakes: its lease is no longer current.
	wake()
	if err := <-result; !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("node a's batch, confirmed after the takeovers: %v, want ErrFenced", err)
	}
}
