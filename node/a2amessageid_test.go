package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A task read after a restart (from its session's events) shows the client's
// messageId as its first message's, as the node that ran it did.
func TestA2ATaskKeepsTheClientsMessageIDAfterARestart(t *testing.T) {
	cfg := node.Config{A2A: &node.A2AConfig{}, DataDir: t.TempDir(), Model: a2aScript(t, llm.ScriptStep{Content: "done"})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	msg := userMessage("hello")
	msg.ID = "client-message-7"
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted || len(task.History) == 0 || task.History[0].ID != msg.ID {
		t.Fatalf("before the restart: %s, history %+v", task.Status.State, task.History)
	}
	stop()

	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	t.Cleanup(api.Close)
	client, _ = a2aClient(t, api.URL, a2a.CardPath)
	got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) == 0 || got.History[0].ID != msg.ID {
		var ids []string
		for _, m := range got.History {
			ids = append(ids, m.ID)
		}
		t.Fatalf("after the restart, the task's messages are %q, want the first %q", ids, msg.ID)
	}
}

// gateTool holds each call until open is closed, then answers "opened".
type gateTool struct {
	started chan struct{}
	open    chan struct{}
}

func (g *gateTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "gate", Description: "waits until the test opens it"}
}

func (g *gateTool) Call(ctx context.Context, _ tools.Call) (string, error) {
	g.started <- struct{}{}
	select {
	case <-g.open:
		return "opened", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// A blocking message/send sent again with the same messageId while its task runs
// (a client that lost the first answer to a timeout retries) answers as the first
// sending does, with the task ended, not with the task working and its answer
// unwritten.
func TestA2ARetriedBlockingMessageAnswersWhenTheTaskEnds(t *testing.T) {
	gate := &gateTool{started: make(chan struct{}, 1), open: make(chan struct{})}
	model := a2aScript(t, llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "gate", Arguments: "{}"}}},
		llm.ScriptStep{Content: "done"})
	n := nodetest.Start(t, node.Config{A2A: &node.A2AConfig{}, Model: model, Tools: []tools.Tool{gate}})
	arrived := make(chan struct{}, 16)
	h := n.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived <- struct{}{}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client, _ := a2aClient(t, srv.URL, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	msg := userMessage("open the gate")
	nonBlocking := false
	if _, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg, Config: &sdk.MessageSendConfig{Blocking: &nonBlocking}}); err != nil {
		t.Fatal(err)
	}
	<-arrived
	select {
	case <-gate.started:
	case <-ctx.Done():
		t.Fatal("the tool never started")
	}

	again := userMessage("open the gate")
	again.ID = msg.ID
	type answer struct {
		res sdk.SendMessageResult
		err error
	}
	retried := make(chan answer, 1)
	go func() {
		res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: again})
		retried <- answer{res, err}
	}()
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the retry never reached the node")
	}
	close(gate.open)
	var got answer
	select {
	case got = <-retried:
	case <-ctx.Done():
		t.Fatal("the retried message/send never answered")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	task, ok := got.res.(*sdk.Task)
	if !ok {
		t.Fatalf("the retry answered %T, want the task", got.res)
	}
	if task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != "done" {
		t.Fatalf("the retry answered the task %s with its answer %q, want it completed with %q", task.Status.State, artifactText(t, task), "done")
	}
}
