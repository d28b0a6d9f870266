package a2a

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// logBackend is a Backend of the sessions of an event log that lists its running
// sessions (RunningLister), and counts its reads: the sessions read, and the
// listings.
type logBackend struct {
	silentBackend
	log      eventlog.Log
	mu       sync.Mutex
	read     []string
	listings int
}

func (b *logBackend) Events(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	b.mu.Lock()
	b.read = append(b.read, session)
	b.mu.Unlock()
	return b.log.Read(ctx, session, from)
}

func (b *logBackend) RunningSessions(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	b.listings++
	b.mu.Unlock()
	infos, err := b.log.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning})
	var out []string
	for _, i := range infos {
		out = append(out, i.ID)
	}
	return out, err
}

// EndedAmong tells which of many tasks ended with one listing of the running
// sessions, reading only the sessions that run a task (whose tasks may have
// ended or not), and answers as Ended does for each.
func TestTaskStoreEndedAmongListsTheRunningSessionsOnce(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// record records a session's events: a message ID submits a task (its
	// task.submitted), "" ends the task before (task.completed).
	record := func(session string, steps ...string) {
		t.Helper()
		var events []messages.Envelope
		for i, step := range steps {
			var p messages.Payload = &messages.TaskCompleted{Output: "done", Steps: 1}
			if step != "" {
				p = &messages.TaskSubmitted{Input: "hi"}
			}
			e, err := messages.NewEnvelope(p)
			if err != nil {
				t.Fatal(err)
			}
			e.SessionID, e.Seq, e.TS = session, uint64(i+1), int64(1_800_000_000_000_000+i)
			e.ID = fmt.Sprintf("%s-%d", session, i+1)
			if step != "" {
				e.ID = EnvelopeID(session, step)
			}
			events = append(events, e)
		}
		if err := l.Append(ctx, events); err != nil {
			t.Fatal(err)
		}
	}
	record("done", "m-done", "")
	record("run", "m-run")
	record("two", "m-first", "", "m-second")
	for i := range 20 {
		record(fmt.Sprintf("old%d", i), fmt.Sprintf("m-old%d", i), "")
	}
	want := map[sdk.TaskID]bool{
		TaskIDFor("done", "m-done"): true, TaskIDFor("run", "m-run"): false,
		TaskIDFor("two", "m-first"): true, TaskIDFor("two", "m-second"): false,
		TaskIDFor("gone", "m-gone"): true, // no such session: no task to notify of
		"not-a-task-id":             true,
	}
	for i := range 20 {
		want[TaskIDFor(fmt.Sprintf("old%d", i), fmt.Sprintf("m-old%d", i))] = true
	}
	b := &logBackend{log: l}
	store := NewTaskStore(b)
	got, err := store.EndedAmong(ctx, slices.Collect(maps.Keys(want)))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("EndedAmong = %v; want %v", got, want)
	}
	slices.Sort(b.read)
	if b.listings != 1 || !slices.Equal(b.read, []string{"run", "two", "two"}) {
		t.Errorf("EndedAmong of %d tasks listed the running sessions %d times and read sessions %v; want one listing, and the running sessions' tasks read",
			len(want), b.listings, b.read)
	}
	for id, ended := range want {
		if store.Ended(ctx, id) != ended {
			t.Errorf("Ended(%s) = %v; want %v, as EndedAmong", id, !ended, ended)
		}
	}
}

// A store holds at most its bound of tasks, whatever their state: tasks that do
// not end (waiting for input, or working for days) were never dropped, so a node
// serving many of them grew without bound. A dropped task is rebuilt from its
// session's events; a claimed one, not recorded yet, is never dropped, and the
// ones used last stay.
func TestTaskStoreBoundsTasksThatDoNotEnd(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	store := NewTaskStore(&logBackend{log: l})
	store.max = 8
	task := func(i int) *sdk.Task {
		session := fmt.Sprintf("s%d", i)
		return &sdk.Task{ID: TaskIDFor(session, fmt.Sprintf("m%d", i)), ContextID: session,
			Status: sdk.TaskStatus{State: sdk.TaskStateInputRequired}}
	}
	claimedTask := &sdk.Task{ID: TaskIDFor("c", "mc"), ContextID: "c", Status: sdk.TaskStatus{State: sdk.TaskStateSubmitted}}
	claimedTask.Metadata = map[string]any{ClaimKey: true}
	if ok, err := store.claim(ctx, claimedTask); err != nil || !ok {
		t.Fatalf("claim = %v, %v; want true", ok, err)
	}
	for i := range 100 {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.TS, e.ID = fmt.Sprintf("s%d", i), 1, 1_800_000_000_000_000, EnvelopeID(fmt.Sprintf("s%d", i), fmt.Sprintf("m%d", i))
		if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, task(i)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := store.Get(ctx, task(0).ID); err != nil { // used often: stays
				t.Fatal(err)
			}
		}
	}
	store.mu.Lock()
	n, first, last, c := len(store.live), store.live[task(0).ID], store.live[task(99).ID], store.live[claimedTask.ID]
	store.mu.Unlock()
	if n > store.max {
		t.Errorf("the store holds %d tasks after 100 that wait for input; want at most %d", n, store.max)
	}
	if first == nil || last == nil || c == nil {
		t.Errorf("the store dropped a task used last (%v, %v) or the claimed one (%v)", first != nil, last != nil, c != nil)
	}
	got, err := store.Get(ctx, task(3).ID)
	if err != nil {
		t.Fatalf("a dropped task: %v; want it rebuilt from its session's events", err)
	}
	if got.ID != task(3).ID || got.ContextID != "s3" || got.Status.State.Terminal() {
		t.Errorf("a dropped task rebuilt as %s in %s, %s; want %s in s3, not ended", got.ID, got.ContextID, got.Status.State, task(3).ID)
	}
}
