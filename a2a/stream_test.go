package a2a

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/troupe-run/troupe/messages"
)

// streamBackend is a Backend whose every task streams an answer of n tokens: its
// session records task.submitted, model.requested, model.responded and
// task.completed, and its watcher gets them live with the n deltas between the
// call's request and its answer.
type streamBackend struct {
	n    int
	mu   sync.Mutex
	log  []messages.Envelope
	live chan messages.Envelope
}

func newStreamBackend(n int) *streamBackend {
	return &streamBackend{n: n, live: make(chan messages.Envelope, n+16)}
}

func (b *streamBackend) envelope(p messages.Payload, seq uint64) messages.Envelope {
	e, err := messages.NewEnvelope(p)
	if err != nil {
		panic(err)
	}
	e.Seq = seq
	return e
}

func (b *streamBackend) SubmitTask(_ context.Context, sub Submission) error {
	session, envID := sub.SessionID, sub.EnvelopeID
	const key = "call-1"
	submitted := b.envelope(&messages.TaskSubmitted{Input: "count"}, 1)
	submitted.ID, submitted.SessionID = envID, session
	requested := b.envelope(&messages.ModelRequested{Key: key, Step: 1}, 2)
	var whole string
	deltas := make([]messages.Envelope, b.n)
	for i := range deltas {
		piece := fmt.Sprintf("tok%d ", i)
		whole += piece
		deltas[i] = b.envelope(&messages.ModelDelta{Key: key, Step: 1, Seq: uint64(i + 1), Content: piece}, 0)
	}
	responded := b.envelope(&messages.ModelResponded{Key: key, Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: whole}}, 3)
	completed := b.envelope(&messages.TaskCompleted{Output: whole, Steps: 1}, 4)
	requested.SessionID, responded.SessionID, completed.SessionID = session, session, session
	b.mu.Lock()
	b.log = append(b.log, submitted, requested, responded, completed)
	b.mu.Unlock()
	b.live <- submitted
	b.live <- requested
	for _, d := range deltas {
		b.live <- d
	}
	b.live <- responded
	b.live <- completed
	return nil
}

func (b *streamBackend) Events(_ context.Context, session string, from uint64) ([]messages.Envelope, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []messages.Envelope
	for _, e := range b.log {
		if e.SessionID == session && e.Seq >= from {
			out = append(out, e)
		}
	}
	return out, nil
}

func (b *streamBackend) Watch(string) (<-chan messages.Envelope, func()) { return b.live, func() {} }

func (b *streamBackend) Cancel(context.Context, string, string) error { return nil }

func (b *streamBackend) Approve(context.Context, string, string, bool, string) error { return nil }

// streamTask runs one message/stream of an n-token answer through the SDK's
// handler, the executor and the task store; each event seen goes to each (nil: none).
func streamTask(tb testing.TB, n int, each func(*TaskStore, sdk.Event)) {
	b := newStreamBackend(n)
	store := NewTaskStore(b)
	exec := NewExecutor(b, "default")
	d := NewDedupe(a2asrv.NewHandler(exec, a2asrv.WithTaskStore(store)), exec, store)
	artifacts := 0
	var last sdk.TaskState
	for ev, err := range d.OnSendMessageStream(context.Background(), &sdk.MessageSendParams{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "count"})}) {
		if err != nil {
			tb.Fatal(err)
		}
		switch v := ev.(type) {
		case *sdk.TaskArtifactUpdateEvent:
			artifacts++
		case *sdk.TaskStatusUpdateEvent:
			last = v.Status.State
		}
		if each != nil {
			each(store, ev)
		}
	}
	if last != sdk.TaskStateCompleted || artifacts < n+2 {
		tb.Fatalf("the stream ended %s after %d artifact events, want completed after %d", last, artifacts, n+2)
	}
}

// The task saved at each token holds the text streamed so far, however the SDK
// goes on appending to the task it saved, and the completed one the answer whole.
func TestStoreKeepsEachSavedTask(t *testing.T) {
	var texts []string
	var id sdk.TaskID
	streamTask(t, 50, func(s *TaskStore, ev sdk.Event) {
		if _, ok := ev.(*sdk.TaskArtifactUpdateEvent); !ok {
			return
		}
		id = ev.TaskInfo().TaskID
		task, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, artifactText(task))
	})
	var want string
	for i := range 50 {
		want += fmt.Sprintf("tok%d ", i)
		// The stream is read as it is written: a task read at an event has that
		// event's text, or a later one's.
		if got := texts[i]; len(got) < len(want) || got[:len(want)] != want {
			t.Fatalf("after token %d the task has %q, want %q first", i, got, want)
		}
	}
	if last := texts[len(texts)-1]; last != want {
		t.Fatalf("the completed task's answer: %q", last)
	}
}

// artifactText is the text of a task's artifacts.
func artifactText(t *sdk.Task) string {
	var out string
	for _, a := range t.Artifacts {
		for _, p := range a.Parts {
			if tp, ok := p.(sdk.TextPart); ok {
				out += tp.Text
			}
		}
	}
	return out
}

// BenchmarkStreamedAnswer measures a message/stream whose answer streams n tokens
// (each an artifact event the SDK saves the task at).
func BenchmarkStreamedAnswer(b *testing.B) {
	for _, n := range []int{500, 1000, 2000} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				streamTask(b, n, nil)
			}
		})
	}
}

// A task read while it runs never says working once its session's events say it
// ended, though the SDK saves its answer artifact and its end one after the other:
// tasks/get between the two answers the end. Each task's events are all in the log
// from its start, so every read of a task that shows its whole answer must show it
// completed; the store's hook reads each task at each save (the window between the
// two saves included), and pollers read the tasks meanwhile too.
func TestTaskReadBetweenItsAnswerAndItsEndSaysItEnded(t *testing.T) {
	b := newStreamBackend(3)
	store := NewTaskStore(b)
	const whole = "tok0 tok1 tok2 "
	var mu sync.Mutex
	var bad []string
	check := func(task *sdk.Task, err error, who string) {
		if err != nil || artifactText(task) != whole || task.Status.State == sdk.TaskStateCompleted {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		bad = append(bad, fmt.Sprintf("%s: task %s says %s with its whole answer", who, task.ID, task.Status.State))
	}
	store.saved = func(saved *sdk.Task) {
		task, err := store.Get(context.Background(), saved.ID)
		check(task, err, "at a save")
	}
	exec := NewExecutor(b, "default")
	d := NewDedupe(a2asrv.NewHandler(exec, a2asrv.WithTaskStore(store)), exec, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const tasks = 20
	ids := make(chan sdk.TaskID, tasks)
	var polls sync.WaitGroup
	for range 4 {
		polls.Add(1)
		go func() {
			defer polls.Done()
			var seen []sdk.TaskID
			for {
				select {
				case id, ok := <-ids:
					if !ok {
						return
					}
					seen = append(seen, id)
				default:
				}
				for _, id := range seen {
					task, err := d.OnGetTask(ctx, &sdk.TaskQueryParams{ID: id})
					check(task, err, "poll")
				}
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	no := false
	for range tasks {
		res, err := d.OnSendMessage(ctx, &sdk.MessageSendParams{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "count"}),
			Config: &sdk.MessageSendConfig{Blocking: &no}})
		if err != nil {
			t.Fatal(err)
		}
		id := res.(*sdk.Task).ID
		ids <- id
		// The backend's tasks share one live stream: one runs at a time.
		for {
			task, err := store.Get(ctx, id)
			if err == nil && task.Status.State == sdk.TaskStateCompleted && artifactText(task) == whole {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("task %s did not end: %v", id, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(ids)
	polls.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d reads were older than the log, first: %s", len(bad), bad[0])
	}
}

// message/send (SendMessage) gives the task with the history its configuration's
// historyLength asks for, as tasks/get does: none for 0, the whole without it; and
// so does a message sent again.
func TestSendMessageHonoursHistoryLength(t *testing.T) {
	b := newStreamBackend(3)
	store := NewTaskStore(b)
	exec := NewExecutor(b, "default")
	d := NewDedupe(a2asrv.NewHandler(exec, a2asrv.WithTaskStore(store)), exec, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(m *sdk.Message, length *int) *sdk.Task {
		t.Helper()
		res, err := d.OnSendMessage(ctx, &sdk.MessageSendParams{Message: m, Config: &sdk.MessageSendConfig{HistoryLength: length}})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*sdk.Task)
	}
	zero := 0
	m := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "count"})
	again := *m
	if task := send(m, &zero); task.History == nil || len(task.History) != 0 {
		t.Fatalf("historyLength 0: %d messages of history (nil: %v), want none", len(task.History), task.History == nil)
	}
	if task := send(&again, &zero); len(task.History) != 0 {
		t.Fatalf("historyLength 0, sent again: %d messages of history, want none", len(task.History))
	}
	if task := send(sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "count"}), nil); len(task.History) == 0 {
		t.Fatal("no historyLength: no history")
	}
}
