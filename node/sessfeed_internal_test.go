package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
		n.serveFeed(ctx, &out, func() {}, func() {}, sub, feedFilter{}, time.Hour)
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
		n.serveFeed(context.Background(), &lockedBuf{}, func() {}, func() {}, sub, feedFilter{}, time.Hour)
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
			n.serveFeed(ctx, out, func() {}, func() {}, sub, feedFilter{}, time.Hour)
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
// events after it. Only the first change the feed sees of the session reads it all.
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
		n.serveFeed(ctx, out, func() {}, func() {}, sub, feedFilter{}, time.Hour)
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
		case from <= 500:
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
