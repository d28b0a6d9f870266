package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/messages"
)

// froms is a Backend over one session's log that notes the seq each read of its
// events starts at.
type froms struct {
	streamBackend
	mu    sync.Mutex
	reads []uint64
}

// longSession appends to b's log 1,000 earlier tasks of session, then at seq
// 1001 the task.submitted (input) of the task of message m-1, and returns that
// task's ID and its envelope's.
func (b *froms) longSession(session, input string) (sdk.TaskID, string) {
	for i := 1; i <= 1000; i++ {
		e := b.envelope(&messages.TaskSubmitted{Input: fmt.Sprintf("old %d", i)}, uint64(i))
		e.SessionID = session
		b.log = append(b.log, e)
	}
	id := TaskIDFor(session, "m-1")
	_, envID, _ := ParseTaskID(id)
	submitted := b.envelope(&messages.TaskSubmitted{Input: input}, 1001)
	submitted.ID, submitted.SessionID = envID, session
	b.log = append(b.log, submitted)
	return id, envID
}

func (b *froms) Events(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	b.mu.Lock()
	b.reads = append(b.reads, from)
	b.mu.Unlock()
	return b.streamBackend.Events(ctx, session, from)
}

// A read of a task that runs checks its session's events for its end (so that it
// never says working once they say it ended), but from the task's task.submitted
// on once it knows where that is, not the session's whole history each time: an
// A2A conversation is one session, and a client polls tasks/get.
func TestReadOfARunningTaskReadsItsSessionFromTheTask(t *testing.T) {
	b := &froms{streamBackend: *newStreamBackend(1)}
	const session = "long"
	id, _ := b.longSession(session, "now")
	requested := b.envelope(&messages.ModelRequested{Key: "call-1", Step: 1}, 1002)
	requested.SessionID = session
	b.log = append(b.log, requested)

	store := NewTaskStore(b)
	ctx := context.Background()
	if err := store.Save(ctx, &sdk.Task{ID: id, ContextID: session, Status: sdk.TaskStatus{State: sdk.TaskStateWorking}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		task, err := store.Get(ctx, id)
		if err != nil || task.Status.State != sdk.TaskStateWorking {
			t.Fatalf("task %v, %v: want it working", task, err)
		}
		// A save between reads keeps what the reads learnt.
		if err := store.Save(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if want := []uint64{1, 1001, 1001}; fmt.Sprint(b.reads) != fmt.Sprint(want) {
		t.Fatalf("reads of the session's events from seqs %v, want %v", b.reads, want)
	}
	completed := b.envelope(&messages.TaskCompleted{Output: "done", Steps: 1}, 1003)
	completed.SessionID = session
	b.log = append(b.log, completed)
	if task, err := store.Get(ctx, id); err != nil || task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("task %v, %v: want it completed once its session says so", task, err)
	}
}

// A task this process does not hold (run by another node over the same log, or
// before a restart), read again and again as a client polling tasks/get does,
// reads its session's events from its task.submitted on once a read found it,
// not the session's whole history each time, and says the same; a session
// rewritten without the task there is read whole again.
func TestReadOfATaskNotHeldReadsItsSessionFromTheTask(t *testing.T) {
	b := &froms{streamBackend: *newStreamBackend(1)}
	const session = "long"
	id, _ := b.longSession(session, "now")
	requested := b.envelope(&messages.ModelRequested{Key: "call-1", Step: 1}, 1002)
	requested.SessionID = session
	b.log = append(b.log, requested)

	store := NewTaskStore(b)
	ctx := context.Background()
	for range 3 {
		task, err := store.Get(ctx, id)
		if err != nil || task.Status.State != sdk.TaskStateWorking {
			t.Fatalf("task %v, %v: want it working", task, err)
		}
	}
	completed := b.envelope(&messages.TaskCompleted{Output: "done", Steps: 1}, 1003)
	completed.SessionID = session
	b.log = append(b.log, completed)
	task, err := store.Get(ctx, id)
	if err != nil || task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("task %v, %v: want it completed once its session says so", task, err)
	}
	whole, err := NewTaskStore(b).Get(ctx, id)
	got, _ := json.Marshal(task)
	want, _ := json.Marshal(whole)
	if err != nil || string(got) != string(want) {
		t.Fatalf("task %s, %v; a store that never read it says %s", got, err, want)
	}
	if want := []uint64{1, 1001, 1001, 1001, 1}; fmt.Sprint(b.reads) != fmt.Sprint(want) {
		t.Fatalf("reads of the session's events from seqs %v, want %v", b.reads, want)
	}
	// The session begun again: the task is not at that seq any more.
	b.log = b.log[:1000]
	b.reads = nil
	if _, err := store.Get(ctx, id); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("a task no longer in its session: %v, want ErrTaskNotFound", err)
	}
	if want := []uint64{1001, 1}; fmt.Sprint(b.reads) != fmt.Sprint(want) {
		t.Fatalf("reads of the session's events from seqs %v, want %v", b.reads, want)
	}
}

// taskEvents reads a task's events from the seq given when its task.submitted is
// there, and from the first when it is not (elsewhere, another task's, or no seq).
func TestTaskEventsReadsFromTheTaskWhenItIsStillThere(t *testing.T) {
	b := &froms{streamBackend: *newStreamBackend(1)}
	_, envID := b.longSession("long", "hi")
	for _, c := range []struct {
		from  uint64
		reads []uint64
		first uint64
	}{
		{from: 1001, reads: []uint64{1001}, first: 1001},
		{from: 1000, reads: []uint64{1000, 1}, first: 1}, // another task's
		{from: 1002, reads: []uint64{1002, 1}, first: 1}, // past the log
		{from: 0, reads: []uint64{1}, first: 1},
	} {
		b.reads = nil
		events, err := taskEvents(context.Background(), b, "long", envID, c.from)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(b.reads) != fmt.Sprint(c.reads) || len(events) == 0 || events[0].Seq != c.first {
			t.Errorf("from %d: read from %v, first seq %d; want %v, %d", c.from, b.reads, events[0].Seq, c.reads, c.first)
		}
	}
}
