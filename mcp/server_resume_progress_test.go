package mcp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// A run_task call that asked for progress goes on getting it on its stream
// resumed after a restart, with progress above all it got before (the spec's
// MUST increase). Before, the resumed stream told nothing until the answer: a
// client whose request timeout progress resets (the TypeScript SDK's
// resetTimeoutOnProgress, which the README gives for tasks longer than its 60 s)
// timed out on a long task after a restart of the node, though the task ran on.
func TestServerHTTPResumedRunTaskTellsProgress(t *testing.T) {
	first := newHoldModel(false)
	r := newRestartable(t, mcp.ServerOptions{ProgressInterval: 100 * time.Millisecond}, first)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	resumed := make(chan struct{}, 64)
	cs := r.connect(ctx, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params)
		mu.Unlock()
		if strings.Contains(req.Params.Message, "resumed") {
			resumed <- struct{}{}
		}
	}})
	answered := make(chan error, 1)
	go func() {
		params := &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "a long one"}}
		params.SetProgressToken("long-1")
		res, err := cs.CallTool(ctx, params)
		if err == nil && (res.IsError || textOf(res) != "held: a long one") {
			t.Errorf("run_task: %+v", res)
		}
		answered <- err
	}()
	select {
	case <-first.asked:
	case <-ctx.Done():
		t.Fatal("the model was never asked")
	}
	second := newHoldModel(false) // the resumed task runs on
	r.restart(second)
	for range 2 {
		select {
		case <-resumed:
		case <-time.After(20 * time.Second):
			t.Fatal("no progress on the call's stream within 20 s of the restart, while its task runs")
		}
	}
	close(second.release)
	if err := <-answered; err != nil {
		t.Fatalf("run_task across the restart: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range got {
		if p.ProgressToken != "long-1" || i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("notification %d: token %v, progress %v after %v (%q)", i, p.ProgressToken, p.Progress, got[max(i-1, 0)].Progress, p.Message)
		}
	}
}
