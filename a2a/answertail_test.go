package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/troupe-run/troupe/messages"
)

// approving is a Backend over one long session whose last task waits for the
// approval of a call: an approval records its answer and the task's end.
type approving struct {
	froms
	approved []string
}

func (b *approving) Approve(_ context.Context, session, key string, approve bool, _ string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.approved = append(b.approved, key)
	last := b.log[len(b.log)-1].Seq
	resolved := b.envelope(&messages.ApprovalResolved{Key: key, Approve: approve, By: "a2a"}, last+1)
	completed := b.envelope(&messages.TaskCompleted{Output: "deleted", Steps: 1}, last+2)
	resolved.SessionID, completed.SessionID = session, session
	resolved.CorrelationID, completed.CorrelationID = b.log[1000].ID, b.log[1000].ID
	b.log = append(b.log, resolved, completed)
	b.live <- resolved
	b.live <- completed
	return nil
}

var uuids = regexp.MustCompile(`"messageId":"[0-9a-f]{8}-[0-9a-f-]{27}"`)

// newApproving returns the backend, and the ID of the task that waits.
func newApproving() (*approving, sdk.TaskID) {
	b := &approving{froms: froms{streamBackend: *newStreamBackend(1)}}
	const session = "long"
	id, envID := b.longSession(session, "delete it")
	asked := b.envelope(&messages.ApprovalRequested{Key: "long/1002", CallID: "c1", Tool: "delete", Arguments: "{}"}, 1002)
	asked.SessionID, asked.CorrelationID = session, envID
	b.log = append(b.log, asked)
	return b, id
}

// An answer to a task in input-required (message/send "approve") reads the
// task's session from its task.submitted on, where the task store's read of the
// task found it, to answer the calls that wait and follow the task to its end,
// not the session's whole history twice; and it answers as those reads did.
func TestAnswerToATaskReadsItsSessionFromTheTask(t *testing.T) {
	run := func(tasks bool) (*approving, string) {
		t.Helper()
		b, id := newApproving()
		store := NewTaskStore(b)
		exec := NewExecutor(b, "default")
		runs := exec
		if !tasks {
			runs = NewExecutor(b, "default") // not the Dedupe's: as before, whole reads
		}
		d := NewDedupe(a2asrv.NewHandler(runs, a2asrv.WithTaskStore(store)), exec, store)
		m := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "approve"})
		m.TaskID, m.ContextID = id, "long"
		res, err := d.OnSendMessage(context.Background(), &sdk.MessageSendParams{Message: m})
		if err != nil {
			t.Fatal(err)
		}
		task, ok := res.(*sdk.Task)
		if !ok || task.Status.State != sdk.TaskStateCompleted {
			t.Fatalf("answered %#v, want the task completed", res)
		}
		task.Status.Timestamp = nil
		got, _ := json.Marshal(task)
		// The messages the SDK makes have random IDs.
		return b, uuids.ReplaceAllString(string(got), `"messageId":"-"`)
	}
	b, got := run(true)
	whole := 0
	for _, from := range b.reads {
		if from == 1 {
			whole++
		}
	}
	if whole != 1 {
		t.Fatalf("reads of the session's events from seqs %v: %d of them whole, want only the task store's first", b.reads, whole)
	}
	wb, want := run(false)
	if got != want || fmt.Sprint(b.approved) != fmt.Sprint(wb.approved) {
		t.Fatalf("answered %s, approving %v; reading the whole history %s, approving %v", got, b.approved, want, wb.approved)
	}
	t.Logf("reads from %v; whole reads from %v", b.reads, wb.reads)
}

// runningTold is a Backend that tells the task a session runs (RunningTasks)
// from the session's events, as the node tells it from its kept fold.
type runningTold struct {
	froms
	told int
}

func (b *runningTold) RunningTask(_ context.Context, session string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.told++
	var events []messages.Envelope
	for _, e := range b.log {
		if e.SessionID == session {
			events = append(events, e)
		}
	}
	return RunningTask(events), nil
}

// tasks/cancel of a task asks a backend that tells which task its session runs
// (RunningTasks: the node's kept fold of the session), and reads none of the
// session's events, where it read its whole history at each cancel; it refuses
// the cancel of a task queued behind another as before.
func TestCancelAsksTheBackendWhichTaskRuns(t *testing.T) {
	b := &runningTold{froms: froms{streamBackend: *newStreamBackend(1)}}
	for i := 1; i <= 1000; i++ {
		e := b.envelope(&messages.TaskSubmitted{Input: fmt.Sprintf("old %d", i)}, uint64(i))
		e.ID, e.SessionID = fmt.Sprintf("old-%d", i), "long"
		b.log = append(b.log, e) // the first runs, the others wait their turn
	}
	id := TaskIDFor("long", "m-1")
	_, envID, _ := ParseTaskID(id)
	queued := b.envelope(&messages.TaskSubmitted{Input: "queued"}, 1001)
	queued.ID, queued.SessionID = envID, "long"
	b.log = append(b.log, queued)
	err := NewExecutor(b, "default").Cancel(context.Background(), &a2asrv.RequestContext{TaskID: id, ContextID: "long"}, nil)
	if !errors.Is(err, sdk.ErrTaskNotCancelable) || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("tasks/cancel of a queued task: %v, want TaskNotCancelable saying it is queued", err)
	}
	if len(b.reads) != 0 || b.told != 1 {
		t.Fatalf("tasks/cancel read the session's events from seqs %v and asked the backend %d times, want no read and one question", b.reads, b.told)
	}
}

// tasks/resubscribe to a task of a long session reads the session's events from
// the task's task.submitted on once the task store's reads found it there (a
// client polls tasks/get), not the session's whole history, and yields the
// same task.
func TestResubscribeReadsTheSessionFromTheTask(t *testing.T) {
	resubscribe := func(gets int) (*approving, string) {
		t.Helper()
		b, id := newApproving()
		store := NewTaskStore(b)
		exec := NewExecutor(b, "default")
		d := NewDedupe(a2asrv.NewHandler(exec, a2asrv.WithTaskStore(store)), exec, store)
		for range gets {
			if _, err := store.Get(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for ev, err := range d.OnResubscribeToTask(context.Background(), &sdk.TaskIDParams{ID: id}) {
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(ev)
			got = append(got, string(b))
		}
		return b, strings.Join(got, "\n")
	}
	b, got := resubscribe(2)
	if want := []uint64{1, 1001, 1001}; fmt.Sprint(b.reads) != fmt.Sprint(want) {
		t.Fatalf("reads of the session's events from seqs %v, want %v", b.reads, want)
	}
	if _, want := resubscribe(0); got != want || !strings.Contains(got, `"input-required"`) {
		t.Fatalf("yielded %s; reading the whole history %s (the task in input-required)", got, want)
	}
}
