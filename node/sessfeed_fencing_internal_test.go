package node

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A fenced takeover where the fence's check and the write are not one step
// (eventlog.Fencing, as on ClickHouse): node a's last batch lands after node b took
// the partition and read the session, and a feed reading a log that lags folds it
// at a change of b's, before b's own events at those seqs show. Once they show and
// replace it, the next change's row is refolded from the whole history: it is the
// row of a whole read, not one that keeps a's usage.
func TestSessionFeedRefoldsRowsWhoseEventsATakeoverReplaced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	fence := eventlog.Fencing(log)
	// SQLite checks the fence and writes in one transaction, so a stale owner's
	// write cannot land after a takeover there: the test writes it behind the log's
	// back, as the conformance suite does (eventlogtest.Features.WriteStale).
	raw, err := sql.Open("sqlite", filepath.Join(dir, "events.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })

	event := func(owner string, seq uint64, p messages.Payload) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor, e.CorrelationID = fmt.Sprintf("%s-%d", owner, seq), "s", seq, int64(1000*seq), "session", "a-1"
		return e
	}
	responded := func(owner string, seq uint64, prompt int) messages.Envelope {
		return event(owner, seq, &messages.ModelResponded{Key: "m1", Model: "m", Usage: messages.Usage{PromptTokens: prompt, CompletionTokens: 1}})
	}
	lease := func(node string) eventlog.Lease {
		epoch, err := fence.Own(ctx, node, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return eventlog.Lease{Partition: 0, Epoch: epoch}
	}

	feed := newSessionFeed(nil)
	a := lease("a")
	submitted := event("a", 1, &messages.TaskSubmitted{Input: "mail bob", Agent: "mailer"})
	if err := fence.AppendLeased(ctx, a, []messages.Envelope{submitted, event("a", 2, &messages.ModelRequested{Key: "m1", Model: "m", Step: 1})}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := feed.makeRow(ctx, log, submitted); err != nil {
		t.Fatal(err)
	}

	// b takes the partition over and reads the session (seqs 1 and 2); then a's
	// answer, whose check passed before, lands at seq 3.
	b := lease("b")
	stale := responded("a", 3, 1000)
	if _, err := raw.Exec(`INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, stale.SessionID, int64(stale.Seq), stale.ID, string(stale.Type), stale.Version,
		stale.CausationID, stale.CorrelationID, stale.TS, stale.Actor, []byte(stale.Payload), int64(a.Epoch)); err != nil {
		t.Fatal(err)
	}
	// b's seq 4 reaches the feed (the bus) while the log shows a's seq 3, not b's.
	ownAnswer := responded("b", 3, 7)
	waiting := event("b", 4, &messages.ApprovalRequested{Key: "t-mail", CallID: "c1", Tool: "send_email"})
	if _, _, err := feed.makeRow(ctx, log, waiting); err != nil {
		t.Fatal(err)
	}

	// b's events show, in place of a's (ClickHouse's Read returns the highest epoch
	// at each seq; SQLite holds one event a seq: a's goes).
	if _, err := raw.Exec(`DELETE FROM events WHERE session_id = ? AND seq = 3`, "s"); err != nil {
		t.Fatal(err)
	}
	if err := fence.AppendLeased(ctx, b, []messages.Envelope{ownAnswer, waiting,
		event("b", 5, &messages.ApprovalResolved{Key: "t-mail", Approve: true, By: messages.ApprovedByHTTP}),
		event("b", 6, &messages.ToolCallCompleted{Key: "t-mail", CallID: "c1", Tool: "send_email", Result: "sent"}),
		event("b", 7, &messages.ModelRequested{Key: "m2", Model: "m", Step: 2}),
		responded("b", 8, 5),
	}); err != nil {
		t.Fatal(err)
	}
	done := event("b", 9, &messages.TaskCompleted{Output: "sent"})
	if err := fence.AppendLeased(ctx, b, []messages.Envelope{done}); err != nil {
		t.Fatal(err)
	}

	row, _, err := feed.makeRow(ctx, log, done)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := newSessionFeed(nil).makeRow(ctx, log, done)
	if err != nil {
		t.Fatal(err)
	}
	if want.Usage.PromptTokens != 12 {
		t.Fatalf("the whole read's row counts %d prompt tokens, want b's 7 + 5", want.Usage.PromptTokens)
	}
	if !reflect.DeepEqual(row, want) {
		t.Fatalf("the row after the takeover: %+v\nthe row of a whole read: %+v", row, want)
	}
}
