package a2a

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// Close closes the sender's keep-alive connections to webhooks (they outlived
// it), and a connection left unused is closed after pushIdleConnTimeout.
func TestPushSenderCloseClosesIdleConnections(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	hook := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	hook.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	hook.Start()
	t.Cleanup(hook.Close)
	opened := func() int { mu.Lock(); defer mu.Unlock(); return len(open) }
	ps, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tr := ps.client.Transport.(*http.Transport); tr.IdleConnTimeout != pushIdleConnTimeout {
		t.Errorf("the transport keeps an idle connection %v; want %v", tr.IdleConnTimeout, pushIdleConnTimeout)
	}
	posted := make(chan struct{})
	ps.final = func(context.Context, sdk.TaskID, string, sdk.TaskState, int) { close(posted) }
	if err := ps.SendPush(context.Background(), &sdk.PushConfig{ID: "c", URL: hook.URL}, &sdk.Task{ID: "t", Status: sdk.TaskStatus{State: sdk.TaskStateCompleted}}); err != nil {
		t.Fatal(err)
	}
	wait(t, posted, "the end is posted")
	if opened() != 1 {
		t.Fatalf("%d connections to the webhook after the post; want the one kept alive", opened())
	}
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for opened() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the webhook still open after Close", opened())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
