package a2a

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// A webhook that is down (it hangs) while a task runs many steps must not be
// owed every snapshot of the task once it is back: each post is the whole task,
// so a queue of every update held memory growing with the square of the task's
// steps, and the webhook got the task's end only after all the stale working
// snapshots, each up to 2 minutes of retries while it hung.
func TestPushSenderKeepsOnlyTheLatestSnapshotOfAStateWhileTheWebhookIsDown(t *testing.T) {
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		posts []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		_ = json.NewDecoder(r.Body).Decode(&task)
		<-release // down: the webhook hangs until released
		mu.Lock()
		posts = append(posts, string(task.Status.State)+" "+task.Status.Message.ID)
		mu.Unlock()
	}))
	defer hook.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = time.Millisecond
	cfg := &sdk.PushConfig{ID: "c", URL: hook.URL}
	push := func(st sdk.TaskState, step string) {
		t.Helper()
		task := &sdk.Task{ID: "t1", Status: sdk.TaskStatus{State: st, Message: &sdk.Message{ID: step}}}
		if err := s.SendPush(context.Background(), cfg, task); err != nil {
			t.Fatal(err)
		}
	}
	const steps = 500
	push(sdk.TaskStateWorking, "step 0")
	for i := 1; i <= steps; i++ {
		push(sdk.TaskStateWorking, "step "+string(rune('0'+i%10)))
	}
	push(sdk.TaskStateCompleted, "end")
	close(release) // the webhook is back
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), posts...)
		mu.Unlock()
		if n := len(got); n > 0 && slices.Contains(got, "completed end") {
			// The post under way when it went down, the latest working snapshot, the end.
			// The end is sent while the webhook still hangs on the first (whose
			// client the end cut short), so the two handlers wake together at the
			// release and record in either order.
			if n > 3 {
				t.Fatalf("the webhook back got %d posts before the task's end (%q … %q), want at most the latest working snapshot before it", n, got[:2], got[n-2:])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook got %d posts and not the end within 20 s", len(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
