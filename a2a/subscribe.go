package a2a

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/troupe-run/troupe/messages"
)

// Subscriptions. tasks/resubscribe (A2A 0.3) and SubscribeToTask (1.0) are served
// from the task's session, not from the SDK's in-memory queue of the execution
// that started it: so a client whose stream broke (a restart, a load balancer)
// gets its task on any node over the same log — the one that runs it, another
// one, the same one restarted — the way TaskStore answers tasks/get. The stream
// begins with the task as its session's events tell it (taskOf) and goes on with
// the events that follow, as the executor reports them (Executor.follow): status
// updates, the answer artifact as the model streams it, the end. A model call
// already streaming when the subscriber came shows its text so far, then its next
// increments, where the node hands them over (Backend.Watch: Node.WatchDeltas), else
// its answer whole once recorded. A task in input-required is where 0.3's streams end (the
// status is final): its subscription yields it and ends; 1.0 streams until the
// task ends, so its SubscribeToTask reports input-required and follows on once
// the calls are answered, waiting on the session's live events, not reading the
// log, while nobody answers (Executor.follow). An ended task: 0.3 yields it and ends; 1.0 answers
// UnsupportedOperationError, as its specification says (GetTask reads it).

// OnResubscribeToTask implements a2asrv.RequestHandler: the task, then its events
// until it ends (see Subscriptions above).
func (d *Dedupe) OnResubscribeToTask(ctx context.Context, p *sdk.TaskIDParams) iter.Seq2[sdk.Event, error] {
	if p == nil {
		return func(yield func(sdk.Event, error) bool) {
			yield(nil, fmt.Errorf("%w: no task id", sdk.ErrInvalidParams))
		}
	}
	v1 := isV1(ctx)
	return endOnStop(ctx, func(ctx context.Context) iter.Seq2[sdk.Event, error] {
		return d.subscribe(ctx, p, subscription{throughInput: v1, refuseEnded: v1})
	})
}

// subscription says how a subscription answers a task waiting for approval and an
// ended one.
type subscription struct {
	// throughInput: follow a task in input-required on, to its end; else yield it
	// and end.
	throughInput bool
	// refuseEnded: an ended task is an error (sdk.ErrUnsupportedOperation); else
	// it is yielded as it ended.
	refuseEnded bool
}

// taskEvents reads task id's events (the package's taskEvents) from where the
// task store's reads found its task.submitted (TaskStore.submittedSeq).
func (d *Dedupe) taskEvents(ctx context.Context, id sdk.TaskID, session, envID string) ([]messages.Envelope, error) {
	var from uint64
	if d.store != nil {
		from = d.store.submittedSeq(id)
	}
	return taskEvents(ctx, d.exec.backend, session, envID, from)
}

// subscribe streams task p.ID from its session's events as sub says.
func (d *Dedupe) subscribe(ctx context.Context, p *sdk.TaskIDParams, sub subscription) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		session, envID, ok := ParseTaskID(p.ID)
		if !ok {
			// Not an ID of TaskIDFor's: only the SDK's execution may know it.
			for ev, err := range d.RequestHandler.OnResubscribeToTask(ctx, p) {
				if !yield(ev, err) {
					return
				}
			}
			return
		}
		events, err := d.taskEvents(ctx, p.ID, session, envID)
		if err != nil {
			yield(nil, fmt.Errorf("a2a: session %s: %w", session, err))
			return
		}
		task, run, err := taskOf(p.ID, session, envID, events)
		if errors.Is(err, sdk.ErrTaskNotFound) {
			d.subscribeUnrecorded(ctx, p, yield)
			return
		}
		if err == nil && d.store.foreign(events, envID) {
			yield(nil, fmt.Errorf("%w: task %s is another agent's", sdk.ErrTaskNotFound, p.ID))
			return
		}
		if err != nil {
			yield(nil, err)
			return
		}
		state := task.Status.State
		switch {
		case state.Terminal() && sub.refuseEnded:
			yield(nil, fmt.Errorf("%w: task %s is %s: a task that ended has no more updates; GetTask reads it", sdk.ErrUnsupportedOperation, p.ID, state))
			return
		case state.Terminal(), state == sdk.TaskStateInputRequired && !sub.throughInput:
			yield(task, nil)
			return
		}
		// Watched from before the task is yielded (a subscriber acts on it, an
		// approval for one); what came between the events read and the watch,
		// follow reads first (it reads the log after run's last event at once).
		live, stop := d.exec.backend.Watch(session)
		defer stop()
		if !yield(task, nil) {
			return
		}
		mode := followMode{throughInput: sub.throughInput}
		if state == sdk.TaskStateInputRequired {
			mode.asked = waitingKeys(run.waiting())
		}
		rc := &a2asrv.RequestContext{TaskID: p.ID, ContextID: session, StoredTask: task}
		w := &yieldWriter{yield: yield}
		err = d.exec.follow(ctx, rc, w, session, envID, live, run, mode)
		if err != nil && !w.gone && ctx.Err() == nil {
			yield(nil, err)
		}
	}
}

// subscribeUnrecorded streams a task its session has not recorded: one this
// process claimed whose execution has not submitted it yet has the SDK's events;
// any other is not found.
func (d *Dedupe) subscribeUnrecorded(ctx context.Context, p *sdk.TaskIDParams, yield func(sdk.Event, error) bool) {
	task, err := d.store.Get(ctx, p.ID)
	if err != nil {
		yield(nil, err)
		return
	}
	if task.Metadata[ClaimKey] != nil {
		c := *task
		c.Metadata = maps.Clone(task.Metadata)
		delete(c.Metadata, ClaimKey)
		task = &c
	}
	if !yield(task, nil) || task.Status.State.Terminal() {
		return
	}
	for ev, err := range d.RequestHandler.OnResubscribeToTask(ctx, p) {
		if errors.Is(err, sdk.ErrTaskNotFound) {
			return // its execution ended meanwhile: the task yielded is all there is
		}
		if !yield(ev, err) {
			return
		}
	}
}

// yieldWriter is the eventqueue.Writer a subscription follows its task into: each
// event goes to the subscriber, until it goes away.
type yieldWriter struct {
	yield func(sdk.Event, error) bool
	gone  bool
}

func (w *yieldWriter) Write(_ context.Context, ev sdk.Event) error {
	if w.gone || !w.yield(ev, nil) {
		w.gone = true
		return eventqueue.ErrQueueClosed
	}
	return nil
}

var _ eventqueue.Writer = (*yieldWriter)(nil)
