package a2a

import (
	"context"
	"errors"
	"fmt"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// namedCanceler is a Backend that cancels a task by its ID (TaskCanceler). The
// task it tells running (RunningTask) is the one named; its Cancel, of whatever
// the session runs when it is handled, would find the next task running (the
// named one ended in between).
type namedCanceler struct {
	streamBackend
	running   string
	unnamed   int
	named     []string
	cancelErr error
}

func (b *namedCanceler) RunningTask(context.Context, string) (string, error) { return b.running, nil }

func (b *namedCanceler) Cancel(context.Context, string, string) error {
	b.unnamed++
	return nil
}

func (b *namedCanceler) CancelTask(_ context.Context, _, envelopeID, _ string) error {
	b.named = append(b.named, envelopeID)
	return b.cancelErr
}

// tasks/cancel names its task to a backend that cancels a task by its ID: the
// task whether it runs or waits its turn behind another (A2A cancels a task that
// is submitted or working), and never the other task, even when the named one
// ends just before the cancellation is handled. Before, it read which task ran
// and then cancelled whatever ran when the cancellation was handled (the next
// task, if the named one ended in between), and refused to cancel a queued task.
func TestCancelNamesItsTask(t *testing.T) {
	id := TaskIDFor("ctx-1", "m-1")
	_, envID, _ := ParseTaskID(id)
	rc := &a2asrv.RequestContext{TaskID: id, ContextID: "ctx-1"}
	for _, running := range []string{envID, "a2a-other"} { // it runs, or waits behind another
		b := &namedCanceler{streamBackend: *newStreamBackend(1), running: running}
		q := &recordingQueue{}
		if err := NewExecutor(b, "default").Cancel(context.Background(), rc, q); err != nil {
			t.Fatalf("running %s: tasks/cancel: %v", running, err)
		}
		if b.unnamed != 0 || len(b.named) != 1 || b.named[0] != envID {
			t.Fatalf("running %s: cancelled %d times whatever ran and by ID %v, want once by ID %s", running, b.unnamed, b.named, envID)
		}
		if q.written() != 1 {
			t.Fatalf("running %s: %d events written, want the canceled status", running, q.written())
		}
	}
	b := &namedCanceler{streamBackend: *newStreamBackend(1), running: "a2a-other",
		cancelErr: fmt.Errorf("%w: it ended", ErrTaskNotRunning)}
	if err := NewExecutor(b, "default").Cancel(context.Background(), rc, &recordingQueue{}); !errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("tasks/cancel of a task that ended: %v, want TaskNotCancelable", err)
	}
}

// tasks/cancel whose backend sent the cancellation but cannot tell yet what
// became of the task (a sharded node whose session owner recorded no end in
// time) answers an internal error saying so, and writes no canceled status: the
// task may complete all the same. Before, any cancellation sent was answered
// canceled.
func TestCancelUnconfirmedIsNotCanceled(t *testing.T) {
	id := TaskIDFor("ctx-1", "m-1")
	rc := &a2asrv.RequestContext{TaskID: id, ContextID: "ctx-1"}
	b := &namedCanceler{streamBackend: *newStreamBackend(1), cancelErr: fmt.Errorf("%w: no end recorded within 10s", ErrCancelUnconfirmed)}
	q := &recordingQueue{}
	err := NewExecutor(b, "default").Cancel(context.Background(), rc, q)
	if !errors.Is(err, sdk.ErrInternalError) || errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("tasks/cancel without the task's end: %v, want an internal error", err)
	}
	if q.written() != 0 {
		t.Fatalf("%d events written, want none (the task was not seen canceled)", q.written())
	}
}
