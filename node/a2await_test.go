package node_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// readsOf counts the reads of one session's events (set once known).
type readsOf struct {
	eventlog.Log
	mu      sync.Mutex
	session string
	reads   int
}

func (l *readsOf) Read(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	l.mu.Lock()
	if sessionID == l.session {
		l.reads++
	}
	l.mu.Unlock()
	return l.Log.Read(ctx, sessionID, from)
}

func (l *readsOf) count(session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != session {
		l.session, l.reads = session, 0
	}
	return l.reads
}

// A 1.0 SubscribeToTask subscriber to a task that waits for approval waits on the
// node's live events: while nobody answers, it reads nothing from the log; once the
// task is approved (by another client), it reports it working, then completed.
func TestA2ASubscribeToTaskWaitingForApprovalReadsNoLog(t *testing.T) {
	var sent atomic.Int64
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
		{Content: "mailed"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	log := &readsOf{Log: sharedLog(t)}
	n, base := a2aNode(t, node.Config{Log: log, Model: model, Tools: []tools.Tool{emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("the task is %s, want input-required", task.Status.State)
	}
	waitApproval(t, n, task.ContextID)

	before := log.count(task.ContextID)
	feed := v1Subscribe(t, ctx, base+"/a2a/mailer", task.ID)
	if r, _ := nextV1(t, feed); v1State(r) != "TASK_STATE_INPUT_REQUIRED" || r.result["task"] == nil {
		t.Fatalf("the first event: %+v, want the task waiting for approval", r)
	}
	// The subscription reads the log twice as it starts (the task, then what came
	// since), then waits.
	waitFor(t, 10*time.Second, "the subscription's first reads", func() bool { return log.count(task.ContextID)-before >= 2 })
	time.Sleep(time.Second) // several reads' worth of polling at 250 ms
	if reads := log.count(task.ContextID) - before; reads != 2 {
		t.Fatalf("the subscriber read the session %d times while the task waited, want 2 (as it started)", reads)
	}

	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = task.ID, task.ContextID
	if _, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: answer}); err != nil {
		t.Fatal(err)
	}
	var states []string
	for {
		r, ok := nextV1(t, feed)
		if !ok {
			break
		}
		if r.code != 0 {
			t.Fatalf("after %v: error %+v", states, r)
		}
		if s := v1State(r); s != "" && (len(states) == 0 || states[len(states)-1] != s) {
			states = append(states, s)
		}
	}
	if got := strings.Join(states, " "); got != "TASK_STATE_WORKING TASK_STATE_COMPLETED" {
		t.Fatalf("after the approval: %q, want working, then completed", got)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1", sent.Load())
	}
}
