package mcp_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A Go SDK client whose run_task call's context ends (a timeout, the user's
// Ctrl-C) and which then closes its session, as the SDK's examples do, gets its
// task cancelled: the SDK sends the call's notifications/cancelled from another
// goroutine after the call returned, and Close ended the connection first (its
// DELETE of the session is all the server gets), so the task ran on, and paid its
// model, for nobody. The node now takes the DELETE of a session as its client
// being done with its calls: a named task (task_id) goes on, for the client to
// come back to by its name.
func TestServerHTTPDeletedSessionCancelsItsTasks(t *testing.T) {
	m := newHoldModel(false)
	n := nodetest.Start(t, node.Config{Model: m})
	// A heartbeat this short finds the closed session at once: the task was
	// left running then, not merely not cancelled yet.
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{ProgressInterval: 50 * time.Millisecond}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls, stop := context.WithCancel(ctx)
	returned := make(chan error, 2)
	for _, args := range []map[string]any{
		{"input": "nobody waits for this", "session_id": "deleted-unnamed"},
		{"input": "come back for this", "task_id": "deleted-named"},
	} {
		go func() {
			_, err := cs.CallTool(calls, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: args})
			returned <- err
		}()
	}
	for range 2 {
		select {
		case <-m.asked:
		case <-ctx.Done():
			t.Fatal("the model was not asked for both tasks")
		}
	}
	stop()
	for range 2 {
		if err := <-returned; err == nil {
			t.Error("a cancelled call answered")
		}
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	status := func(id string) messages.TaskResult {
		st, _, err := n.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := status("deleted-unnamed"); st.Status != messages.StatusFailed; st = status("deleted-unnamed") {
		if time.Now().After(deadline) {
			t.Fatalf("the task of the deleted session is %s 10 s after the DELETE, want failed (cancelled)", st.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := status("deleted-unnamed"); st.Reason != messages.ReasonCancelled {
		t.Errorf("the task of the deleted session failed for %q: %s", st.Reason, st.Error)
	}
	close(m.release)
	deadline = time.Now().Add(30 * time.Second)
	for st := status("task.deleted-named"); st.Status != messages.StatusCompleted; st = status("task.deleted-named") {
		if st.Status == messages.StatusFailed || time.Now().After(deadline) {
			t.Fatalf("the named task of the deleted session: %+v, want it completed", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
