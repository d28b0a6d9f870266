package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// readCounted is a log that counts the events its reads return, and whose reads
// can be sent to another log (swap): the same session's history rewritten.
type readCounted struct {
	eventlog.Log
	events atomic.Int64
	other  atomic.Pointer[eventlog.Log]
}

func (l *readCounted) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	lg := l.Log
	if o := l.other.Load(); o != nil {
		lg = *o
	}
	events, err := lg.Read(ctx, session, from)
	l.events.Add(int64(len(events)))
	return events, err
}

func (l *readCounted) swap(to eventlog.Log) { l.other.Store(&to) }

// renaming is a log that appends the event whose ID is from as to.
type renaming struct {
	eventlog.Log
	from, to string
}

func (l renaming) Append(ctx context.Context, events []messages.Envelope) error {
	events = slices.Clone(events)
	for i := range events {
		if events[i].ID == l.from {
			events[i].ID = l.to
		}
	}
	return l.Log.Append(ctx, events)
}

func openLog(t testing.TB) eventlog.Log {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	return lg
}

// statusAnswers is what the reads of a session's state answer from st: the
// body of GET /v1/sessions/{id}, each task's result, and an approval's check.
func statusAnswers(t *testing.T, id string, st *actors.SessionState, approval string) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(sessionView{SessionStatus: statusOf(id, st), Approvals: pendingApprovals(id, st)}); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= st.LastSeq; seq++ {
		task := fmt.Sprintf("%s/%d", id, seq)
		if status, out, errMsg, ok := st.Task(task); ok {
			fmt.Fprintf(&b, "%s %s %q %q %q %q %q\n", task, st.TaskName(task), status, out, errMsg, st.TaskReason(task), st.TaskNote(task))
		}
	}
	pending, dup, err := st.CheckAnswer(approval, true)
	fmt.Fprintf(&b, "%+v %v %v\n", pending, dup, err)
	return b.String()
}

// A session's state read from the fold the last read kept and the events after
// it is the state a fold of its whole history gives, and answers the same, for a
// session of many tasks that goes on (a task waiting for an approval, then
// approved and ended), and the kept fold is not used once the log no longer
// holds what it folded: the session's history rewritten with the same IDs
// (pruned and begun again) or with other events at the seqs it read last.
func TestStatusFoldIsTheWholeFold(t *testing.T) {
	ctx := context.Background()
	log := &readCounted{Log: openLog(t)}
	w := newHistoryWriter(t, log.Log, "s")
	w.tasks(60, 3) // 1,000 events
	var kept statusFolds
	check := func(what string, approval string, wantRead int64, wantIn ...string) {
		t.Helper()
		log.events.Store(0)
		var got string
		var gotState *actors.SessionState
		if _, err := kept.with(ctx, log, "s", func(st *actors.SessionState) error {
			got, gotState = statusAnswers(t, "s", st, approval), st
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if read := log.events.Load(); wantRead >= 0 && read > wantRead {
			t.Fatalf("%s: the read read %d events, want at most %d", what, read, wantRead)
		}
		var whole statusFolds // keeps nothing: folds the whole history
		var want string
		if _, err := whole.with(ctx, log, "s", func(st *actors.SessionState) error {
			want = statusAnswers(t, "s", st, approval)
			if !reflect.DeepEqual(gotState, st) {
				t.Errorf("%s: the state kept and folded on is not the whole fold's", what)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: answered\n%s\nwant, as the whole history's fold:\n%s", what, got, want)
		}
		for _, s := range wantIn {
			if !strings.Contains(got, s) {
				t.Fatalf("%s: answered\n%s\nwithout %s", what, got, s)
			}
		}
	}
	check("first read", "none", -1, `"status":"completed"`, `"max_steps"`, `"noted "`)
	check("read again", "none", feedVerify)
	w.tasks(2, 2)
	check("after two tasks", "none", feedVerify+20)
	key := w.waiting()
	check("a task waiting for approval", key, feedVerify+8, `"status":"running"`, `"approvals":[{"session_id":"s","call":"c1-1"`)
	check("a task waiting for approval, read again", "c1-1", feedVerify, `"approvals":[{`)
	w.approve(key)
	check("the approval answered", key, feedVerify+4, `"output":"deleted "`, "true <nil>")
	w.tasks(1, 1)
	check("the next task", key, feedVerify+8)

	// The same history's shape and IDs, another content: the kept fold's last
	// event's digest differs.
	again := openLog(t)
	w2 := newHistoryWriter(t, again, "s")
	w2.tag = "again"
	w2.tasks(63, 3)
	w2.tasks(1, 1)
	if w2.seq < w.seq {
		t.Fatalf("the rewritten history has %d events, the first %d", w2.seq, w.seq)
	}
	log.swap(again)
	check("rewritten with the same IDs", key, -1, `"output":"done again"`)
	log.events.Store(0)
	check("rewritten, read again", key, feedVerify)

	// Another event among the last the kept fold read (a takeover's), with the
	// same last event: another ID there.
	third := openLog(t)
	w3 := newHistoryWriter(t, renaming{Log: third, from: fmt.Sprintf("s/%d", w2.seq-1), to: "other"}, "s")
	w3.tag = "again"
	w3.tasks(63, 3)
	w3.tasks(1, 1)
	log.swap(third)
	check("another event among the last", "none", -1)
	// Events the kept fold read gone (a log that lags behind another's).
	fourth := openLog(t)
	w4 := newHistoryWriter(t, fourth, "s")
	w4.tag = "again"
	w4.tasks(63, 3)
	log.swap(fourth)
	check("the last events gone", "none", -1)

	// A log without the session: no session, and nothing kept answers for it.
	log.swap(openLog(t))
	if _, err := kept.with(ctx, log, "s", func(*actors.SessionState) error { return nil }); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("a session gone from the log: %v, want ErrUnknownSession", err)
	}
}

// GET /v1/sessions/{id} (the dashboard's session view), read again as a client
// polling a long session does, reads of the log only the events appended since
// the last read (and the few before, checked again), not the session's whole
// history, and answers, byte for byte, what a node that never read it answers.
func TestSessionStatusReadsOnlyTheTail(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	log := &readCounted{Log: lg}
	w := newHistoryWriter(t, lg, "long")
	w.tasks(200, 3) // 3,400 events
	start := func(lg eventlog.Log) http.Handler {
		t.Helper()
		n, err := New(ctx, Config{Log: lg, DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := n.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return n.Handler()
	}
	get := func(h http.Handler) string {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions/long", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /v1/sessions/long: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	h := start(log)
	first := get(h)
	for round := range 3 {
		log.events.Store(0)
		got := get(h)
		if read := log.events.Load(); read > feedVerify+int64(round)*16 {
			t.Fatalf("round %d: GET /v1/sessions/long read %d events of the session's %d", round, read, w.seq)
		}
		if want := get(start(lg)); got != want {
			t.Fatalf("round %d: answered\n%s\nwant, as a node that never read the session:\n%s", round, got, want)
		}
		if round == 0 && got != first {
			t.Fatalf("read again: %s, first %s", got, first)
		}
		w.tasks(1, round) // 2 + 4·round events
	}
}

// A session of few events that hold megabytes (a task's input may be 1 MiB) has
// its fold kept too, as a long one has: read again, it reads the events after
// the last read and the few before, checked again, not its whole history.
func TestSessionStatusOfFewLargeEventsReadsOnlyTheTail(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	log := &readCounted{Log: lg}
	w := newHistoryWriter(t, lg, "heavy")
	w.tag = strings.Repeat("x", 64<<10)
	w.tasks(3, 3) // 42 events, 2.6 MiB
	w.flush()
	if w.seq >= statusFoldFrom {
		t.Fatalf("the session has %d events: this test wants fewer than %d", w.seq, statusFoldFrom)
	}
	var kept statusFolds
	read := func() string {
		t.Helper()
		var got string
		if _, err := kept.with(ctx, log, "heavy", func(st *actors.SessionState) error {
			got = statusAnswers(t, "heavy", st, "")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := read()
	log.events.Store(0)
	if got := read(); got != first {
		t.Fatalf("read again: %s, first %s", got, first)
	}
	if n := log.events.Load(); n > feedVerify {
		t.Fatalf("read again, the session read %d of its %d events, want at most %d", n, w.seq, feedVerify)
	}
}

// The folds kept hold at most maxBytes of their events' payloads: keeping a
// second session's drops the first's, whose next read folds its whole history
// again; a session whose events alone hold more is not kept.
func TestStatusFoldsKeepAtMostTheirBytes(t *testing.T) {
	ctx := context.Background()
	log := &readCounted{Log: openLog(t)}
	for _, id := range []string{"a", "b", "big"} {
		w := newHistoryWriter(t, log.Log, id)
		w.tasks(30, 3)
		if id == "big" {
			w.tasks(30, 3)
		}
	}
	one, err := log.Read(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	kept := statusFolds{maxBytes: int64(messages.PayloadBytes(one)) * 3 / 2}
	read := func(id string) int64 {
		t.Helper()
		log.events.Store(0)
		if _, err := kept.with(ctx, log, id, func(*actors.SessionState) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return log.events.Load()
	}
	whole := int64(len(one))
	for _, step := range []struct {
		id   string
		want int64
	}{{"a", whole}, {"a", feedVerify}, {"b", whole}, {"a", whole}, {"a", feedVerify}, {"big", 2 * whole}, {"big", 2 * whole}, {"a", feedVerify}} {
		if got := read(step.id); got != step.want {
			t.Fatalf("a read of %s read %d events, want %d", step.id, got, step.want)
		}
	}
	if kept.bytes != int64(messages.PayloadBytes(one)) || kept.folds.len() != 1 {
		t.Fatalf("the folds kept count %d bytes in %d folds, want %d in 1", kept.bytes, kept.folds.len(), int64(messages.PayloadBytes(one)))
	}
}

// A read of a session whose kept fold another read holds (its log read hung)
// waits no longer than its context.
func TestStatusFoldWaitEndsWithTheContext(t *testing.T) {
	var kept statusFolds
	ent := kept.entry("s")
	ent.turn <- struct{}{} // another read's
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	log := openLog(t)
	done := make(chan error, 1)
	go func() {
		_, err := kept.with(ctx, log, "s", func(*actors.SessionState) error { return nil })
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the read waiting for its turn: %v, want its context's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read waited past its context's end")
	}
}

// PendingApprovals reads every running session, but keeps no fold of its own: a
// long session polled between its sweeps of more running sessions than
// statusFoldSessions still reads only its tail, and no slot goes to a session
// it read.
func TestPendingApprovalsKeepTheFoldsOfPolledSessions(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	log := &readCounted{Log: lg}
	for i := range statusFoldSessions + 6 {
		w := newHistoryWriter(t, lg, fmt.Sprintf("s%02d", i))
		if i == 0 {
			w.tasks(30, 3)
		}
		w.add("session", &messages.TaskSubmitted{Input: "run", TaskID: fmt.Sprintf("task-%d", w.seq+1)})
		w.flush()
	}
	n, err := New(ctx, Config{Log: log, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	poll := func() int64 {
		t.Helper()
		log.events.Store(0)
		if _, err := n.folds.with(ctx, log, "s00", func(*actors.SessionState) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return log.events.Load()
	}
	whole := poll()
	if whole < statusFoldFrom {
		t.Fatalf("the long session has %d events", whole)
	}
	for round := range 3 {
		if _, err := n.PendingApprovals(ctx); err != nil {
			t.Fatal(err)
		}
		if got := poll(); got > feedVerify {
			t.Fatalf("round %d: a poll of the long session after PendingApprovals read %d events of its %d", round, got, whole)
		}
	}
	if got := n.folds.folds.len(); got != 1 {
		t.Fatalf("%d folds kept, want the long session's alone", got)
	}
}

// hangingRead is a log whose reads of session hang until release is closed.
type hangingRead struct {
	eventlog.Log
	session string
	hung    chan struct{}
	release chan struct{}
}

func (l *hangingRead) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == l.session {
		select {
		case l.hung <- struct{}{}:
			<-l.release
		default:
		}
	}
	return l.Log.Read(ctx, session, from)
}

// A read of a short session (no fold kept) does not wait for another read of it
// whose log read hangs.
func TestShortSessionReadsDoNotQueue(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	w := newHistoryWriter(t, lg, "short")
	w.tasks(2, 1)
	w.flush()
	log := &hangingRead{Log: lg, session: "short", hung: make(chan struct{}), release: make(chan struct{})}
	var kept statusFolds
	first := make(chan error, 1)
	go func() {
		_, err := kept.with(ctx, log, "short", func(*actors.SessionState) error { return nil })
		first <- err
	}()
	<-log.hung // the first read hangs in its log read
	defer close(log.release)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := kept.with(tctx, log, "short", func(*actors.SessionState) error { return nil }); err != nil {
		t.Fatalf("a second read of the short session: %v", err)
	}
}
