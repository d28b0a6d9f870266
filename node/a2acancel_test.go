package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// remoteBlockingAgent starts a node B that serves A2A, whose agent calls a tool that
// blocks until cancelled, and returns the tool and the a2a__b tool of a node that
// calls B, as the configuration's "a2a_agents" makes it. B closes at the test's end
// with its tool still blocking unless the test cancelled it: it cuts the call after
// heldCallGrace.
func remoteBlockingAgent(t *testing.T) (*node.Node, *blockingTool, tools.Tool) {
	t.Helper()
	block := newBlockingTool()
	b, remote := a2aNode(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block}, HandoffGrace: heldCallGrace})
	ts, err := nodeconfig.A2ATools(map[string]string{"b": remote + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	return b, block, ts[0]
}

// remoteSession is B's session of a call of its blocking tool (keyed "<session>/<seq>").
func remoteSession(t *testing.T, block *blockingTool) string {
	t.Helper()
	select {
	case key := <-block.started:
		session, _, _ := strings.Cut(key, "/")
		return session
	case <-time.After(30 * time.Second):
		t.Fatal("the remote agent never called its tool")
	}
	return ""
}

// Cancelling a task that waits on a remote A2A agent cancels the remote agent's task
// (tasks/cancel), and the remote task's own calls with it: closing the HTTP request
// alone leaves it running, since an A2A task outlives its client's connection.
func TestCancelReachesTheRemoteA2AAgentsTask(t *testing.T) {
	b, block, tool := remoteBlockingAgent(t)
	a := nodetest.Start(t, node.Config{Tools: []tools.Tool{tool}, Model: a2aScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: `{"message":"block"}`}}},
		llm.ScriptStep{Content: "unreachable"})})
	if _, err := a.Submit(context.Background(), node.Task{Input: "ask B", SessionID: "a2a-cancel"}); err != nil {
		t.Fatal(err)
	}
	remote := remoteSession(t, block)
	if err := a.Cancel(context.Background(), "a2a-cancel", "enough"); err != nil {
		t.Fatal(err)
	}
	noneOf(t, waitFailed(t, a, "a2a-cancel", messages.ReasonCancelled), messages.TypeToolCallCompleted)
	waitFailed(t, b, remote, messages.ReasonCancelled)
	waitCancelled(t, block, 30*time.Second)
}

// A call that ends because its node stops (its context's cause is
// actors.ErrEffectsClosed) leaves the remote task running: the session's next owner
// performs the call again, the same A2A message, which the running task answers.
func TestStoppingANodeLeavesTheRemoteA2AAgentsTaskRunning(t *testing.T) {
	b, block, tool := remoteBlockingAgent(t)
	ctx, stop := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tool.Call(ctx, tools.Call{Key: "caller/4", Arguments: `{"message":"block"}`})
		done <- err
	}()
	remote := remoteSession(t, block)
	stop(fmt.Errorf("node stopping: %w", actors.ErrEffectsClosed))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not return after its context ended")
	}
	events, err := b.Log().Read(context.Background(), remote, 1)
	if err != nil || len(events) == 0 {
		t.Fatalf("B's session %s: %d events, %v", remote, len(events), err)
	}
	if last := events[len(events)-1]; last.Type != messages.TypeToolCallRequested {
		t.Fatalf("B's session %s ended with %s, want it still waiting on its tool", remote, last.Type)
	}
	if len(block.causes) != 0 {
		t.Fatalf("B's tool call was cancelled: %v", <-block.causes)
	}
}
