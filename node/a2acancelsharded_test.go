package node_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A sharded node's A2A tasks/cancel sends the cancellation to the session's owner
// over the bus, and answers what became of the task once the owner recorded its
// end: canceled when it was cancelled; TaskNotCancelable (-32002) when it
// completed before the cancellation reached its owner; an internal error (never
// canceled) when no end was recorded in time. Before, it answered canceled as soon
// as the cancellation was published, whatever the task's end.
func TestShardedA2ACancelAnswersTheTasksRecordedEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		submit time.Duration // the cancelling node's SubmitTimeout
		owner  func(owner *node.Node, model *heldEcho, session string) error
		want   func(t *testing.T, got *sdk.Task, err error)
		state  sdk.TaskState // the task's state at its end
	}{{
		name: "the owner cancels it", submit: 30 * time.Second,
		owner: func(owner *node.Node, _ *heldEcho, session string) error {
			return owner.Cancel(context.Background(), session, "a2a tasks/cancel")
		},
		want: func(t *testing.T, got *sdk.Task, err error) {
			if err != nil || got.Status.State != sdk.TaskStateCanceled {
				t.Fatalf("tasks/cancel: %+v, %v, want the task canceled", got, err)
			}
		},
		state: sdk.TaskStateCanceled,
	}, {
		name: "it completes first", submit: 30 * time.Second,
		owner: func(_ *node.Node, model *heldEcho, _ string) error {
			close(model.release)
			return nil
		},
		want: func(t *testing.T, got *sdk.Task, err error) {
			if !errors.Is(err, sdk.ErrTaskNotCancelable) {
				t.Fatalf("tasks/cancel of a task that completed first: %+v, %v, want TaskNotCancelable", got, err)
			}
		},
		state: sdk.TaskStateCompleted,
	}, {
		name: "no end recorded in time", submit: 300 * time.Millisecond,
		owner: func(*node.Node, *heldEcho, string) error { return nil },
		want: func(t *testing.T, got *sdk.Task, err error) {
			if err == nil || errors.Is(err, sdk.ErrTaskNotCancelable) {
				t.Fatalf("tasks/cancel without an end recorded: %+v, %v, want an error", got, err)
			}
		},
		state: sdk.TaskStateWorking,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			log := sharedLog(t)
			model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
			owner, ownerURL := a2aNode(t, node.Config{Model: model, Log: log})
			defer func() {
				select {
				case <-model.release:
				default:
					close(model.release)
				}
			}()
			ownerClient, _ := a2aClient(t, ownerURL, a2a.CardPath)
			blocking := false
			res, err := ownerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"), Config: &sdk.MessageSendConfig{Blocking: &blocking}})
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*sdk.Task)
			select {
			case <-model.held:
			case <-ctx.Done():
				t.Fatal("the task's model call was never made")
			}

			client, tasks := shardedA2AClient(t, ctx, log, tc.submit)

			type answer struct {
				task *sdk.Task
				err  error
			}
			answered := make(chan answer, 1)
			go func() {
				got, err := client.CancelTask(ctx, &sdk.TaskIDParams{ID: task.ID})
				answered <- answer{got, err}
			}()
			var msg *message.Message
			select {
			case msg = <-tasks:
				msg.Ack()
			case a := <-answered:
				t.Fatalf("tasks/cancel answered %+v, %v before any cancellation was published", a.task, a.err)
			case <-ctx.Done():
				t.Fatal("no cancellation was published")
			}
			_, envID, _ := a2a.ParseTaskID(task.ID)
			if c, err := messages.DecodeCancelRequest(msg.Payload); err != nil || c.SessionID != task.ContextID || c.TaskID != envID {
				t.Fatalf("published %+v, %v; want the cancellation of task %s", c, err, envID)
			}
			if err := tc.owner(owner, model, task.ContextID); err != nil {
				t.Fatal(err)
			}
			select {
			case a := <-answered:
				tc.want(t, a.task, a.err)
			case <-ctx.Done():
				t.Fatal("tasks/cancel did not answer")
			}
			got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
			if err != nil || got.Status.State != tc.state {
				t.Fatalf("tasks/get after tasks/cancel: %+v, %v, want %s", got, err, tc.state)
			}
		})
	}
}

// shardedA2AClient starts a sharded node serving A2A (the client role: it owns no
// session) on log, publishing on an embedded bus, and returns an A2A client of it
// and what it publishes on troupe.tasks.
func shardedA2AClient(t *testing.T, ctx context.Context, log eventlog.Log, submit time.Duration) (*a2aclient.Client, <-chan *message.Message) {
	t.Helper()
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	tasks, err := bus.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		t.Fatal(err)
	}
	api, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Log: log, Roles: node.RoleClient, A2A: &node.A2AConfig{}, SubmitTimeout: submit,
		Bus: &node.Bus{Publisher: bus, Tasks: bus, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	client, _ := a2aClient(t, srv.URL, a2a.CardPath)
	return client, tasks
}

// A sharded node's tasks/cancel of a task waiting its turn, recorded under
// decision rules older than 10 (which do not end a waiting task), answers
// TaskNotCancelable at once, as a node that runs its sessions does, and publishes
// nothing: the task runs in its turn. (Its owner would drop the cancellation, and
// the client was told canceled.)
func TestShardedA2ACancelOfAQueuedTaskUnderOlderRulesIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := sharedLog(t)
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	owner, ownerURL := a2aNode(t, node.Config{Model: model, Log: log, DecisionRules: 9})
	released := false
	defer func() {
		if !released {
			close(model.release)
		}
	}()
	ownerClient, _ := a2aClient(t, ownerURL, a2a.CardPath)
	blocking := false
	send := func(text, contextID string) *sdk.Task {
		t.Helper()
		m := userMessage(text)
		m.ContextID = contextID
		res, err := ownerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: m, Config: &sdk.MessageSendConfig{Blocking: &blocking}})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*sdk.Task)
	}
	first := send("first, hold", "")
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the first task's model call was never made")
	}
	second := send("second", first.ContextID)
	waitFor(t, 30*time.Second, "the second task recorded", func() bool {
		events, err := owner.Log().Read(ctx, first.ContextID, 1)
		submitted, _, _ := tasksOf(events)
		return err == nil && submitted == 2
	})
	client, tasks := shardedA2AClient(t, ctx, log, 30*time.Second)
	answered := make(chan error, 1)
	go func() {
		_, err := client.CancelTask(ctx, &sdk.TaskIDParams{ID: second.ID})
		answered <- err
	}()
	select {
	case err := <-answered:
		if !errors.Is(err, sdk.ErrTaskNotCancelable) {
			t.Fatalf("tasks/cancel of a task queued under rules 9: %v, want TaskNotCancelable", err)
		}
	case msg := <-tasks:
		msg.Ack()
		t.Fatalf("tasks/cancel of a task queued under rules 9 published %s: want nothing", msg.Payload)
	case <-ctx.Done():
		t.Fatal("tasks/cancel did not answer")
	}
	close(model.release)
	released = true
	waitFor(t, 30*time.Second, "both tasks completed", func() bool {
		events, err := owner.Log().Read(ctx, first.ContextID, 1)
		_, done, _ := tasksOf(events)
		return err == nil && done == 2
	})
}
