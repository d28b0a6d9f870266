package a2a

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// A config deleted (tasks/pushNotificationConfig/delete) while its task's end is
// tried again gets no more of it: before each retry the sender asks the store
// whether the config is still the task's (PushStore.Current). Before, the
// retries went on with the deleted config's token, up to 14 attempts over 10
// minutes.
func TestPushDeletedConfigIsNotTriedAgain(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var hits atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(hook.Close)
	store := NewPushStore(l, nil, nil)
	ps, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	ps.backoff, ps.endBackoffMax = 10*time.Millisecond, 40*time.Millisecond
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")
	cfg, err := store.Save(ctx, task, &sdk.PushConfig{ID: "c1", URL: hook.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	sender := storeSender{PushSender: ps, store: store}
	if err := sender.SendPush(ctx, cfg, &sdk.Task{ID: task, Status: sdk.TaskStatus{State: sdk.TaskStateCompleted}}); err != nil {
		t.Fatal(err)
	}
	for hits.Load() < 2 { // tried, and tried again
		time.Sleep(5 * time.Millisecond)
	}
	if err := store.Delete(ctx, task, "c1"); err != nil {
		t.Fatal(err)
	}
	at := hits.Load()
	time.Sleep(400 * time.Millisecond)
	if n := hits.Load() - at; n > 1 { // the attempt in flight may land
		t.Errorf("%d posts to config c1 after it was deleted; want at most the one in flight", n)
	}
	if ps.busy(task, cfg) {
		t.Error("the deleted config's notifications are still queued")
	}
}
