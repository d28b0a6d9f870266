package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// run_task on a session whose queue is full (node.Config.MaxQueuedTasks) is a
// tool error saying so and to call again later, without the node's error chain;
// nothing is recorded in the session.
func TestServerRunTaskPastMaxQueuedTasks(t *testing.T) {
	for _, over := range []string{"memory", "http"} {
		t.Run(over, func(t *testing.T) {
			m := newGateModel(answerScript(t, "done"))
			defer close(m.free)
			n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{tools.Calculator{}}, MaxQueuedTasks: 1})
			cs := serveBoth(t, over, n, mcp.NewServer(n, mcp.ServerOptions{}), nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			bg, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _, _ = n.RunTask(bg, node.Task{Input: "first", SessionID: "s-full", TaskID: "run"}) }()
			select {
			case <-m.asked:
			case <-ctx.Done():
				t.Fatal("the first task's model call was never made")
			}
			go func() { _, _ = n.RunTask(bg, node.Task{Input: "second", SessionID: "s-full", TaskID: "q1"}) }()
			for submittedTasks(t, n, "s-full") < 2 {
				select {
				case <-ctx.Done():
					t.Fatal("the second task was not recorded")
				case <-time.After(10 * time.Millisecond):
				}
			}
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "third", "session_id": "s-full"}})
			text := answerText(res)
			if err != nil || !res.IsError || !strings.Contains(text, "queue of session s-full is full") || !strings.Contains(text, "again") || strings.Contains(text, "actors:") {
				t.Fatalf("run_task past the bound: %v %q, want a tool error saying the session's queue is full and to call again", err, text)
			}
			if got := submittedTasks(t, n, "s-full"); got != 2 {
				t.Errorf("%d task.submitted events, want 2", got)
			}
		})
	}
}
