package a2a

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// orderHook is a webhook that takes a task's state once it has handled the
// request: an update of a running task (working) only when hold lets it.
type orderHook struct {
	mu     sync.Mutex
	states []sdk.TaskState
	ended  chan struct{} // closed when it took a terminal state
	once   sync.Once
	hold   chan struct{} // nil: no update is held
	in     chan struct{} // closed when an update came
	inOnce sync.Once
}

func newOrderHook(t *testing.T, hold bool) (*orderHook, string) {
	h := &orderHook{ended: make(chan struct{}), in: make(chan struct{})}
	if hold {
		h.hold = make(chan struct{})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var task sdk.Task
		if err := json.Unmarshal(b, &task); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !task.Status.State.Terminal() {
			h.inOnce.Do(func() { close(h.in) })
			if h.hold != nil {
				<-h.hold // the request was read: the webhook takes it, however the sender fares
			}
		}
		h.mu.Lock()
		h.states = append(h.states, task.Status.State)
		h.mu.Unlock()
		if task.Status.State.Terminal() {
			h.once.Do(func() { close(h.ended) })
		}
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *orderHook) got() []sdk.TaskState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.states)
}

// wait waits for c, or fails the test saying what.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20 s", what)
	}
}

// The post of a task's update in flight when its end is queued is not cut: the
// end is posted once the webhook answered it. Its request may have reached the
// webhook, which, cut, takes it still, after the end posted next on another
// connection: the webhook of a task resumed after a restart heard [submitted
// working completed working], the task run again after its end.
func TestPushEndWaitsForTheUpdateInFlight(t *testing.T) {
	hook, url := newOrderHook(t, true)
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.backoff = time.Millisecond
	cfg := &sdk.PushConfig{ID: "c1", URL: url}
	task := func(state sdk.TaskState) *sdk.Task {
		return &sdk.Task{ID: "t1", ContextID: "c", Status: sdk.TaskStatus{State: state}}
	}
	if err := s.SendPush(context.Background(), cfg, task(sdk.TaskStateWorking)); err != nil {
		t.Fatal(err)
	}
	wait(t, hook.in, "the update's post")
	if err := s.SendPush(context.Background(), cfg, task(sdk.TaskStateCompleted)); err != nil {
		t.Fatal(err)
	}
	// The end is not posted while the webhook has the update: a cut post let
	// it be, and the webhook took it first.
	select {
	case <-hook.ended:
	case <-time.After(300 * time.Millisecond):
	}
	close(hook.hold)
	wait(t, hook.ended, "the end's post")
	for deadline := time.Now().Add(10 * time.Second); len(hook.got()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // the update, taken after the end when its post was cut
	}
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v", got, want)
	}
}

// Close stops a sender: the update it was posting is not tried again, nothing is
// posted after Close returns, and nothing it is given after is posted: a node
// that stopped posted on, after the node that resumed its tasks had posted
// their ends.
func TestPushSenderPostsNothingAfterClose(t *testing.T) {
	var hits atomic.Int64
	refused := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		once.Do(func() { close(refused) })
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = 50 * time.Millisecond
	cfg := &sdk.PushConfig{ID: "c1", URL: srv.URL}
	if err := s.SendPush(context.Background(), cfg, &sdk.Task{ID: "t1", Status: sdk.TaskStatus{State: sdk.TaskStateWorking}}); err != nil {
		t.Fatal(err)
	}
	wait(t, refused, "the update's first post")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed := hits.Load()
	if err := s.SendPush(context.Background(), cfg, &sdk.Task{ID: "t2", Status: sdk.TaskStatus{State: sdk.TaskStateCompleted}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the update's three retries would come now
	if n := hits.Load(); n != closed {
		t.Fatalf("%d posts after Close returned (%d before)", n-closed, closed)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// An update of a running task is not posted to a config its end was posted to,
// as the log records (PushStore.Final): by the node before a restart, or by
// another node. Its queue in this process knows nothing of that end, and a
// stale update (the task as read before it ended: the first read of a task a
// node resumes) told the webhook that the task ran again. The end may come
// again.
func TestPushUpdateIsNotPostedAfterTheEndTheLogRecords(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")
	hook, url := newOrderHook(t, false)
	before := NewPushStore(log, nil, nil)
	if _, err := before.Save(ctx, task, &sdk.PushConfig{ID: "c1", URL: url}); err != nil {
		t.Fatal(err)
	}
	if err := before.Final(ctx, task, "c1", sdk.TaskStateCompleted, http.StatusOK); err != nil {
		t.Fatal(err)
	}

	store := NewPushStore(log, nil, nil) // the node that started next
	ps, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	sender := storeSender{PushSender: ps, store: store}
	configs, err := store.List(ctx, task)
	if err != nil || len(configs) != 1 {
		t.Fatalf("the task's configs: %v, %v", configs, err)
	}
	send := func(st sdk.TaskState) {
		t.Helper()
		if err := sender.SendPush(ctx, configs[0], &sdk.Task{ID: task, ContextID: "s1", Status: sdk.TaskStatus{State: st}}); err != nil {
			t.Fatal(err)
		}
	}
	send(sdk.TaskStateWorking)
	select {
	case <-hook.in:
		t.Fatal("an update was posted after the end the log records")
	case <-time.After(300 * time.Millisecond):
	}
	send(sdk.TaskStateCompleted)
	wait(t, hook.ended, "the end's post")
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v", got, want)
	}
}
