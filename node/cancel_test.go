package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// closeWithin bounds how long after a cancellation the provider must see the
// connection of the model call closed.
const closeWithin = time.Second

// heldProvider is a fake OpenAI-compatible provider that holds every request open,
// and a model that calls it.
func heldProvider(t *testing.T) (*openaitest.Server, llm.Model) {
	t.Helper()
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Hold: true} })
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, m
}

// waitHeld waits until the provider holds n requests.
func waitHeld(t *testing.T, srv *openaitest.Server, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, "the model call held by the provider", func() bool { return len(srv.Requests()) >= n })
}

// waitClosed waits (at most closeWithin) for the provider to see a held request's
// connection closed.
func waitClosed(t *testing.T, srv *openaitest.Server, after string) {
	t.Helper()
	select {
	case <-srv.Disconnected():
	case <-time.After(closeWithin):
		t.Fatalf("%s %s, the provider still holds the model call", closeWithin, after)
	}
}

// waitFailed waits until the session's running task failed, and returns its events.
func waitFailed(t *testing.T, n *node.Node, session, reason string) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	waitFor(t, 30*time.Second, "session "+session+" failed with "+reason, func() bool {
		var err error
		events, err = n.Log().Read(context.Background(), session, 1)
		if err != nil || len(events) == 0 || events[len(events)-1].Type != messages.TypeTaskFailed {
			return false
		}
		p, err := events[len(events)-1].Decode()
		return err == nil && p.(*messages.TaskFailed).Reason == reason
	})
	return events
}

// noneOf fails the test for each event of type typ: a cancelled effect's end must not
// be recorded.
func noneOf(t *testing.T, events []messages.Envelope, typ messages.Type) {
	t.Helper()
	for _, e := range events {
		if e.Type == typ {
			t.Errorf("the cancelled effect's end was recorded: %s %s", e.Type, e.Payload)
		}
	}
}

// POST /v1/sessions/{id}/cancel closes the HTTP request of the model call the session
// waits on.
func TestHTTPCancelClosesTheModelRequest(t *testing.T) {
	srv, model := heldProvider(t)
	n := nodetest.Start(t, node.Config{Model: model})
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	if code, out := post(t, api.URL+"/v1/tasks", `{"input":"think hard","session_id":"held-http"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks: %d %v", code, out)
	}
	waitHeld(t, srv, 1)
	if code, out := post(t, api.URL+"/v1/sessions/held-http/cancel", ""); code != http.StatusAccepted {
		t.Fatalf("cancel: %d %v", code, out)
	}
	waitClosed(t, srv, "after POST /v1/sessions/{id}/cancel returned")
	noneOf(t, waitFailed(t, n, "held-http", messages.ReasonCancelled), messages.TypeModelResponded)
}

// A task's deadline closes the HTTP request of the model call the session waits on.
func TestDeadlineClosesTheModelRequest(t *testing.T) {
	srv, model := heldProvider(t)
	n := nodetest.Start(t, node.Config{Model: model})
	if _, err := n.Submit(context.Background(), node.Task{Input: "think hard", SessionID: "held-deadline", DeadlineMS: 300}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, 1)
	noneOf(t, waitFailed(t, n, "held-deadline", messages.ReasonDeadline), messages.TypeModelResponded)
	waitClosed(t, srv, "after the task failed at its deadline")
}

// keyRecorder answers every call and records the keys it was called with.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Name() string { return "recorder" }

func (k *keyRecorder) Generate(_ context.Context, r llm.Request) (llm.Response, error) {
	k.mu.Lock()
	k.keys = append(k.keys, r.Key)
	k.mu.Unlock()
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done at last"}}, nil
}

// Closing a node closes the HTTP request of the model call its session waits on, and
// records nothing of it: the task stays unfinished, and the next node on the log
// issues the call again with the same key.
// heldCallGrace is the HandoffGrace of a node a test closes with a call held in
// flight that never answers (the test then expects it issued again after a
// restart, or left running elsewhere): Close gives the call this long before it
// cuts it, as it would after the default 5 s, which the test would only wait out.
const heldCallGrace = 100 * time.Millisecond

// startWithTask starts a node of cfg and submits task to it: the first node of a
// test that stops it amid the task (the stop it returns) and has the task go on
// elsewhere.
func startWithTask(t *testing.T, cfg node.Config, task node.Task) (*node.Node, func()) {
	t.Helper()
	n, stop := nodetest.StartWithStop(t, cfg)
	if _, err := n.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	return n, stop
}

func TestNodeCloseClosesTheModelRequest(t *testing.T) {
	dir := t.TempDir()
	srv, model := heldProvider(t)
	n, stop := nodetest.StartWithStop(t, node.Config{DataDir: dir, Model: model, HandoffGrace: heldCallGrace})
	if _, err := n.Submit(context.Background(), node.Task{Input: "think hard", SessionID: "held-close"}); err != nil {
		stop()
		t.Fatal(err)
	}
	waitHeld(t, srv, 1)
	events, err := n.Log().Read(context.Background(), "held-close", 1)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, srv, "after the node closed")
	if last := events[len(events)-1]; last.Type != messages.TypeModelRequested {
		t.Fatalf("last event before the close: %s", last.Type)
	}
	p, _ := events[len(events)-1].Decode()
	key := p.(*messages.ModelRequested).Key

	rec := &keyRecorder{}
	again := nodetest.Start(t, node.Config{DataDir: dir, Model: rec})
	waitFor(t, 30*time.Second, "the resumed session finished", func() bool {
		st, ok, err := again.Status(context.Background(), "held-close")
		return err == nil && ok && st.Status != messages.StatusRunning
	})
	resumed, err := again.Log().Read(context.Background(), "held-close", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed) != len(events)+2 || resumed[len(resumed)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("resumed session: %v (%s)", eventTypes(resumed), resumed[len(resumed)-1].Payload)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) != 1 || rec.keys[0] != key {
		t.Errorf("the resumed node called the model with keys %v, want once with %s", rec.keys, key)
	}
}

func eventTypes(events []messages.Envelope) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = string(e.Type)
	}
	return strings.Join(s, " ")
}

// blockingTool blocks until its context ends and reports the cause.
type blockingTool struct {
	started chan string
	causes  chan error
}

func newBlockingTool() *blockingTool {
	return &blockingTool{started: make(chan string, 16), causes: make(chan error, 16)}
}

func (b *blockingTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "block", Description: "waits until cancelled"}
}

func (b *blockingTool) Call(ctx context.Context, c tools.Call) (string, error) {
	b.started <- c.Key
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	return "", ctx.Err()
}

func blockScript(t *testing.T) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "block", Arguments: "{}"}}},
		{Content: "unreachable"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitCancelled waits for a blocking tool to see its context cancelled by the
// session (cause actors.ErrEffectCancelled).
func waitCancelled(t *testing.T, b *blockingTool, within time.Duration) {
	t.Helper()
	select {
	case cause := <-b.causes:
		if !errors.Is(cause, actors.ErrEffectCancelled) {
			t.Fatalf("the tool's context ended with %v, want actors.ErrEffectCancelled", cause)
		}
	case <-time.After(within):
		t.Fatalf("the tool did not see its context cancelled within %s", within)
	}
}

// Cancelling a task cancels the context of the tool call it waits on.
func TestCancelReachesTheRunningTool(t *testing.T) {
	block := newBlockingTool()
	n := nodetest.Start(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block}})
	if _, err := n.Submit(context.Background(), node.Task{Input: "block", SessionID: "tool-cancel"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-block.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	if err := n.Cancel(context.Background(), "tool-cancel", "enough"); err != nil {
		t.Fatal(err)
	}
	waitCancelled(t, block, closeWithin)
	noneOf(t, waitFailed(t, n, "tool-cancel", messages.ReasonCancelled), messages.TypeToolCallCompleted)
}

// A cancellation that travels on troupe.tasks (task.cancel) to the node that owns the
// session closes the HTTP request of the model call the session waits on.
func TestBusCancelClosesTheModelRequest(t *testing.T) {
	srv, model := heldProvider(t)
	k, log := newKafkaEnv(t), sharedLog(t)
	a, _ := clusterNode(t, k, uniqueGroup(t), log, "a", 0, nil, model)
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	session := fmt.Sprintf("held-bus-%d", time.Now().UnixNano())
	if _, err := a.Submit(context.Background(), node.Task{Input: "think hard", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, 1)
	if err := a.Cancel(context.Background(), session, "stop thinking"); err != nil {
		t.Fatal(err)
	}
	noneOf(t, waitFailed(t, a, session, messages.ReasonCancelled), messages.TypeModelResponded)
	waitClosed(t, srv, "after the session recorded the cancellation it read from troupe.tasks")
}

// A node with only the tools role, serving a tool call for a session on another node,
// cancels the call's context when the session's task is cancelled: the session's node
// publishes a messages.EffectCancel, which the tools node reads.
func TestCancelReachesARemoteTool(t *testing.T) {
	k, log, group := newKafkaEnv(t), sharedLog(t), uniqueGroup(t)
	local, remote := newBlockingTool(), newBlockingTool()
	agents, _ := clusterNode(t, k, group, log, "agents", node.RoleSessions|node.RoleModels, []tools.Tool{local}, blockScript(t))
	clusterNode(t, k, group, log, "workers", node.RoleTools, []tools.Tool{remote}, blockScript(t))
	waitFor(t, 60*time.Second, "the agents node owns partitions", func() bool { return agents.PartitionsOwned() > 0 })
	session := fmt.Sprintf("remote-tool-%d", time.Now().UnixNano())
	if _, err := agents.Submit(context.Background(), node.Task{Input: "block", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-remote.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the tools node never ran the tool")
	}
	if err := agents.Cancel(context.Background(), session, "enough"); err != nil {
		t.Fatal(err)
	}
	noneOf(t, waitFailed(t, agents, session, messages.ReasonCancelled), messages.TypeToolCallCompleted)
	// Two hops on the bus: the cancellation to the session's owner, then the effect's
	// cancellation to the tools node.
	waitCancelled(t, remote, 30*time.Second)
	if len(local.started) != 0 {
		t.Error("the agents node ran the tool itself")
	}
}
