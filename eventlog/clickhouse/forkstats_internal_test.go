package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestForkOutcomesCountFromTheFork: session_outcomes counts a fork's steps and
// duration from its session.forked event, as Report does (the conformance suite's
// AnalyticsCountsAForkFromItsFork): the events before it are its parent's, copied
// with their times, and counted from them a fork made 293 s after its parent began
// lasted 293 s.
func TestForkOutcomesCountFromTheFork(t *testing.T) {
	addr, db := fencingDatabase(t, "forkstats")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	at := func(e messages.Envelope, id string, ts int64) messages.Envelope {
		e.ID, e.SessionID, e.TS = id+e.ID[1:], id, ts
		return e
	}
	parent := []messages.Envelope{
		at(sessionEvent(t, 1, "p/1", &messages.TaskSubmitted{Input: "x", Agent: "arithmetic"}), "p", 1_000_000),
		at(sessionEvent(t, 2, "p/1", &messages.ModelRequested{Key: "p/2", Model: "offline", Step: 1}), "p", 1_001_000),
		at(sessionEvent(t, 3, "p/1", &messages.TaskCompleted{Output: "z"}), "p", 1_004_000),
	}
	fork := []messages.Envelope{
		at(sessionEvent(t, 1, "f/1", &messages.TaskSubmitted{Input: "x", Agent: "arithmetic"}), "f", 1_000_000),
		at(sessionEvent(t, 2, "f/1", &messages.ModelRequested{Key: "f/2", Model: "offline", Step: 1}), "f", 1_001_000),
		at(sessionEvent(t, 3, "f/1", &messages.SessionForked{ParentID: "p", AtSeq: 2}), "f", 294_000_000),
		at(sessionEvent(t, 4, "f/1", &messages.ModelRequested{Key: "f/4", Model: "offline", Step: 2}), "f", 294_001_000),
		at(sessionEvent(t, 5, "f/1", &messages.TaskCompleted{Output: "z"}), "f", 294_004_000),
	}
	if err := l.Append(ctx, append(parent, fork...)); err != nil {
		t.Fatal(err)
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var steps float64
	var p50, p95 int64
	if err := l.conn.QueryRow(ctx, "SELECT avg_steps, toInt64(p50_duration_us), toInt64(p95_duration_us) FROM session_outcomes WHERE agent = 'arithmetic'").Scan(&steps, &p50, &p95); err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].P95DurationUS != 4000 || st.Sessions[0].AvgSteps != 1 {
		t.Errorf("Report's sessions = %+v; want 4 ms and 1 step each", st.Sessions)
	}
	if steps != 1 || p50 != 4000 || p95 != 4000 {
		t.Errorf("session_outcomes: %v steps, durations p50 %d µs, p95 %d µs; want 1 step and 4 ms each", steps, p50, p95)
	}
}

// TestForkUsageCountsTheForksOwnCalls: model_usage, tool_usage and memory_ops
// count a fork's own model calls, tool calls and memory operations, those after
// its session.forked event, as Report does (the conformance suite's
// AnalyticsCountsAForksOwnCalls): those before it are its parent's, copied, and
// counted they gave a fork its parent's tokens and cost.
func TestForkUsageCountsTheForksOwnCalls(t *testing.T) {
	addr, db := fencingDatabase(t, "forkusage")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	ev := func(id string, seq uint64, ts int64, p messages.Payload) messages.Envelope {
		e := sessionEvent(t, seq, id+"/1", p)
		e.ID, e.SessionID, e.TS = fmt.Sprintf("%s/%d", id, seq), id, ts+int64(seq)*1000
		return e
	}
	// The parent's calls; a fork copies them with their times.
	calls := func(id string) []messages.Envelope {
		return []messages.Envelope{
			ev(id, 1, 1_000_000, &messages.TaskSubmitted{Input: "x", Agent: "arithmetic"}),
			ev(id, 2, 1_000_000, &messages.ModelResponded{Key: id + "/2", Model: "offline", Usage: messages.Usage{PromptTokens: 100, CostUSD: 0.25}}),
			ev(id, 3, 1_000_000, &messages.ToolCallCompleted{Key: id + "/3", CallID: "c", Tool: "calculator", Result: "4"}),
			ev(id, 4, 1_000_000, &messages.MemoryRemembered{Key: id + "/4", Reason: "remembered"}),
		}
	}
	parent := append(calls("p"), ev("p", 5, 1_000_000, &messages.TaskCompleted{Output: "z"}))
	fork := append(calls("f"),
		ev("f", 5, 294_000_000, &messages.SessionForked{ParentID: "p", AtSeq: 4}),
		ev("f", 6, 294_000_000, &messages.ModelResponded{Key: "f/6", Model: "offline", Usage: messages.Usage{PromptTokens: 7, CostUSD: 0.5}}),
		ev("f", 7, 294_000_000, &messages.TaskCompleted{Output: "z"}))
	if err := l.Append(ctx, append(parent, fork...)); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := l.conn.QueryRow(ctx, `SELECT concat(
			(SELECT concat(toString(sum(calls)), ' model calls, ', toString(sum(prompt_tokens)), ' prompt tokens, $', toString(sum(cost_usd))) FROM model_usage),
			'; ', (SELECT toString(sum(calls)) FROM tool_usage), ' tool calls; ',
			(SELECT toString(sum(operations)) FROM memory_ops), ' memory operations')`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "2 model calls, 107 prompt tokens, $0.75; 1 tool calls; 1 memory operations"; got != want {
		t.Errorf("model_usage, tool_usage, memory_ops: %s; want %s (the fork's own calls, not its parent's again)", got, want)
	}
}
