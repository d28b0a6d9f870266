package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// lockedBuf is a buffer one goroutine writes while another reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A subscriber that never reads does not hold the sessions up: their tasks end,
// the subscriber is marked behind, and its stream then drops the backlog, sends
// resync and goes on with the next changes.
func TestSessionFeedSubscriberThatNeverReadsGetsResyncAndSlowsNothing(t *testing.T) {
	n, err := New(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	sub, leave, err := n.feed.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer leave()

	// Two changes a task: more tasks than the subscriber's buffer holds.
	tasks := feedBuffer/2 + 2
	for i := range tasks {
		runTask(t, n, fmt.Sprintf("slow-%d", i), "hello") // ends, though the subscriber never reads
	}
	select {
	case <-sub.behind:
		sub.behind <- struct{}{} // for serveFeed below
	default:
		t.Fatalf("after %d tasks the subscriber that never read is not behind (%d queued)", tasks, len(sub.ch))
	}
	if len(sub.ch) != feedBuffer {
		t.Fatalf("%d changes queued, want the buffer's %d", len(sub.ch), feedBuffer)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuf
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.serveFeed(ctx, &out, func() {}, sub, feedFilter{})
	}()
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(out.String()); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the stream never wrote %s; it wrote:\n%s", what, out.String())
			}
		}
	}
	waitFor("resync", func(s string) bool { return strings.Contains(s, "event: resync\n") })
	if s := out.String(); strings.Contains(s, "event: session") {
		t.Fatalf("the stream sent queued changes of a backlog it should have dropped:\n%s", s)
	}
	runTask(t, n, "after", "hello")
	waitFor("the next task's end", func(s string) bool {
		return strings.Contains(s, `"session_id":"after","status":"completed"`)
	})
	if s := out.String(); strings.Contains(s, "slow-") {
		t.Fatalf("the stream sent a change of the dropped backlog:\n%s", s)
	}
	cancel()
	<-done
}

func TestSessionFeedFilterKeepsRowsThatMatchOrJustLeftTheStatus(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	row := func(status, agent string, started time.Time) SessionRow {
		r := SessionRow{Agent: agent}
		r.ID, r.Status, r.StartedUS = "s", status, started.UnixMicro()
		return r
	}
	recent, old := now.Add(-time.Minute), now.Add(-48*time.Hour)
	for _, c := range []struct {
		filter feedFilter
		row    SessionRow
		prev   string
		want   bool
	}{
		{feedFilter{}, row("running", "default", old), "", true},
		{feedFilter{status: "running"}, row("running", "default", recent), "", true},
		{feedFilter{status: "completed"}, row("running", "default", recent), "", false},
		{feedFilter{status: "completed"}, row("running", "default", recent), "completed", true},
		{feedFilter{status: "running"}, row("failed", "default", recent), "running", true},
		{feedFilter{status: "failed"}, row("completed", "default", recent), "running", false},
		{feedFilter{agent: "helper"}, row("running", "default", recent), "", false},
		{feedFilter{agent: "helper"}, row("running", "helper", recent), "", true},
		{feedFilter{since: "24h"}, row("running", "default", old), "", false},
		{feedFilter{since: "24h"}, row("running", "default", recent), "", true},
		{feedFilter{since: "2026-12-01"}, row("running", "default", old), "", false},
		{feedFilter{since: "24h", agent: "helper", status: "running"}, row("completed", "helper", recent), "running", true},
	} {
		if got := c.filter.wants(c.row, c.prev, now); got != c.want {
			t.Errorf("%+v wants %s by %s (was %q): %v, want %v", c.filter, c.row.Status, c.row.Agent, c.prev, got, c.want)
		}
	}
}

// When the bus subscription the feed reads ends by itself, its streams end, so that
// their clients connect again and subscribe anew.
func TestSessionFeedStreamsEndWithTheBusSubscription(t *testing.T) {
	n := &Node{feed: newSessionFeed(nil), streamsDone: make(chan struct{})}
	sub, leave, err := n.feed.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.serveFeed(context.Background(), &lockedBuf{}, func() {}, sub, feedFilter{})
	}()
	n.feed.busEnded()
	n.feed.busEnded() // twice: closes nothing twice
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end with the bus subscription")
	}
}

// readCountingLog counts the reads of each session's events, and keeps the first
// seq of each read made under a context marked with feedRead.
type readCountingLog struct {
	eventlog.Log
	mu     sync.Mutex
	reads  map[string]int
	marked map[string][]uint64
}

// feedRead marks the context of the reads a test's feed makes (serveFeed makes its
// rows under a context that keeps its values).
type feedRead struct{}

func (l *readCountingLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	l.mu.Lock()
	l.reads[session]++
	if ctx.Value(feedRead{}) != nil {
		if l.marked == nil {
			l.marked = map[string][]uint64{}
		}
		l.marked[session] = append(l.marked[session], from)
	}
	l.mu.Unlock()
	return l.Log.Read(ctx, session, from)
}

// feedReads returns the first seq of each marked read of session.
func (l *readCountingLog) feedReads(session string) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.marked[session])
}

func (l *readCountingLog) count(session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads[session]
}

// A change's row is made once, whatever the number of subscribers: a session read
// per change, not per change and client (on ClickHouse each is a query).
func TestSessionFeedMakesEachRowOnceForAllSubscribers(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &readCountingLog{Log: base, reads: map[string]int{}}
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outs []*lockedBuf
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	listen := func() {
		sub, leave, err := n.feed.subscribe()
		if err != nil {
			t.Fatal(err)
		}
		out := &lockedBuf{}
		outs = append(outs, out)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer leave()
			n.serveFeed(ctx, out, func() {}, sub, feedFilter{})
		}()
	}
	reads := func(session string) int {
		t.Helper()
		runTask(t, n, session, "hello")
		for _, out := range outs {
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), `"session_id":"`+session+`","status":"completed"`); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("a subscriber never got %s's end:\n%s", session, out.String())
				}
			}
		}
		return log.count(session)
	}
	listen()
	one := reads("one-listener")
	listen()
	listen()
	if three := reads("three-listeners"); three != one {
		t.Fatalf("a task's session was read %d times with three subscribers, %d with one", three, one)
	}
}

// A session with a long history costs no read of it at each change: the row of a
// change folds on from the session's last row, and reads from the log only the
// events after it (and, once, the last feedVerify of those it read before: the
// check of feedFold). Only the first change the feed sees of the session reads it
// all.
func TestSessionFeedReadsOnlyTheEventsAfterASessionsLastRow(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &readCountingLog{Log: base, reads: map[string]int{}}
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for range 125 { // four events a task: 500 before anyone listens
		runTask(t, n, "long", "hello")
	}
	history, err := base.Read(context.Background(), "long", 1)
	if err != nil || len(history) != 500 {
		t.Fatalf("the session has %d events (%v), want 500", len(history), err)
	}

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), feedRead{}, true))
	defer cancel()
	sub, leave, err := n.feed.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	out := &lockedBuf{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.serveFeed(ctx, out, func() {}, sub, feedFilter{})
	}()
	defer func() { cancel(); <-done }()
	const tasks = 3
	for i := range tasks {
		runTask(t, n, "long", "hello")
		// The completed row counts every event, up to the task's last.
		last := 500 + 4*(i+1)
		want := fmt.Sprintf(`"session_id":"long","status":"completed","events":%d,"last_seq":%d,"steps":%d`, last, last, 125+i+1)
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), want); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the feed never sent %s:\n%s", want, out.String())
			}
		}
	}
	reads := log.feedReads("long")
	whole := 0
	for _, from := range reads {
		switch {
		case from == 1:
			whole++
		case from <= 500-feedVerify:
			// The last feedVerify events of the whole read are read again once
			// (feedFold: a takeover may have replaced them).
			t.Errorf("a change read the session from seq %d, inside the history it had before the feed's first row", from)
		}
	}
	if whole != 1 || len(reads) > 2*tasks {
		t.Fatalf("%d changes read the session %d times from seq %v, %d of them the whole history; want one whole read, at the first change", 2*tasks, len(reads), reads, whole)
	}

	// The last row is the one a whole read makes.
	events, err := base.Read(context.Background(), "long", 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := newSessionFeed(nil).makeRow(context.Background(), base, events[len(events)-1])
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	got := strings.TrimPrefix(strings.Split(rows[len(rows)-1], "\n")[1], "data: ")
	if b, _ := json.Marshal(want); got != string(b) {
		t.Fatalf("the last row folded on:\n%s\nthe row of a whole read:\n%s", got, b)
	}
}

// copyLog is a copy of a log that lags (it shows no event past upTo, when upTo is
// set) or lost an event (hole), and records the first seq of each read.
type copyLog struct {
	eventlog.Log
	upTo, hole uint64
	reads      []uint64
}

func (l *copyLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	l.reads = append(l.reads, from)
	events, err := l.Log.Read(ctx, session, from)
	return slices.DeleteFunc(events, func(e messages.Envelope) bool {
		return (l.upTo > 0 && e.Seq > l.upTo) || e.Seq == l.hole
	}), err
}

// The row of a change folded on from the session's kept fold is the row of a whole
// read, whatever came before: a change older than the fold (a subscriber far
// behind) reads the whole history and leaves the fold where it was; a copy of the
// log that lags keeps the fold at what it had, and the next change reads on from
// there; a gap in what a read returns falls back to a whole read. Waiting names the
// calls held for approval until they are answered.
func TestSessionFeedRowsFoldedOnAreThoseOfAWholeRead(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	var events []messages.Envelope
	for i, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "mail bob and clean up", Agent: "mailer"}, // 1
		&messages.ModelRequested{Key: "m1", Model: "m", Step: 1},
		&messages.ModelResponded{Key: "m1", Model: "m", Usage: messages.Usage{PromptTokens: 7, CompletionTokens: 3}},
		&messages.ApprovalRequested{Key: "t-mail", CallID: "c1", Tool: "send_email"},          // 4
		&messages.ApprovalRequested{Key: "t-rm", CallID: "c2", Tool: "rm"},                    // 5
		&messages.ApprovalResolved{Key: "t-mail", Approve: true, By: messages.ApprovedByHTTP}, // 6
		&messages.ToolCallCompleted{Key: "t-mail", CallID: "c1", Tool: "send_email", Result: "sent"},
		&messages.ModelRequested{Key: "m2", Model: "m", Step: 2},
		&messages.ModelResponded{Key: "m2", Model: "m", Usage: messages.Usage{PromptTokens: 11, CompletionTokens: 5}},
		&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "cancelled"}, // 10
		&messages.TaskSubmitted{Input: "again"},                                    // 11
		&messages.ModelRequested{Key: "m3", Model: "m", Step: 1},
		&messages.ModelResponded{Key: "m3", Model: "m", Usage: messages.Usage{PromptTokens: 13, CompletionTokens: 2}},
		&messages.ToolCallCompleted{Key: "t-other", CallID: "c3", Tool: "calculator", Result: "42"},
		&messages.TaskCompleted{Output: "done"}, // 15
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("e%d", i+1), "s", uint64(i+1), int64(1000*(i+1)), "session"
		e.CorrelationID = "e1" // the task's ID: that of its task.submitted
		if i+1 >= 11 {
			e.CorrelationID = "e11"
		}
		events = append(events, e)
	}
	if err := base.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	at := func(seq uint64) messages.Envelope { return events[seq-1] }

	log := &copyLog{Log: base}
	feed := newSessionFeed(nil)
	// check makes the row of the change at seq, and wants the row and the status
	// before it of a whole read, and reads from the seqs given.
	check := func(seq uint64, reads []uint64, waiting ...string) {
		t.Helper()
		log.reads = nil
		row, prev, err := feed.makeRow(ctx, log, at(seq))
		if err != nil {
			t.Fatal(err)
		}
		whole := &copyLog{Log: base, upTo: log.upTo, hole: log.hole}
		wantRow, wantPrev, err := newSessionFeed(nil).makeRow(ctx, whole, at(seq))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(whole.reads, []uint64{1}) && seq > 1 {
			t.Fatalf("the reference row read from %v, not the whole history", whole.reads)
		}
		if !reflect.DeepEqual(row, wantRow) || prev != wantPrev {
			t.Fatalf("seq %d: row %+v (before: %q), a whole read's %+v (before: %q)", seq, row, prev, wantRow, wantPrev)
		}
		if !slices.Equal(row.Waiting, waiting) {
			t.Fatalf("seq %d: waiting %q, want %q", seq, row.Waiting, waiting)
		}
		if !slices.Equal(log.reads, reads) {
			t.Fatalf("seq %d: read from %v, want %v", seq, log.reads, reads)
		}
	}
	check(1, nil)                       // the first event: nothing to read
	check(4, []uint64{2}, "send_email") // from the fold on
	check(5, nil, "send_email", "rm")   // right after the fold
	check(1, nil)                       // far behind, with nothing before it…
	check(4, []uint64{1}, "send_email") // …and behind the fold: a whole read…
	check(6, nil, "rm")                 // …and the fold was left at 5
	log.upTo = 7                        // the copy lags: it has up to 7…
	check(10, []uint64{2})              // …a row from what it has (2 and 3, read from the log, checked again), and the fold keeps 7…
	log.upTo = 0
	check(11, []uint64{7})    // reads on after 7 (7 checked again)
	log.hole = 13             // the copy lost 13…
	check(15, []uint64{8, 1}) // a gap: a whole read, which has the gap too…
	log.hole = 0
	check(15, []uint64{8}) // …and keeps the fold at 11
	if rows, _, _ := feed.makeRow(ctx, log, at(15)); rows.Events != 15 || rows.Usage.PromptTokens != 31 || rows.Steps != 3 || rows.Agent != "mailer" || rows.Status != messages.StatusCompleted {
		t.Fatalf("the last row: %+v", rows)
	}
}
