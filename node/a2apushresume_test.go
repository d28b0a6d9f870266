package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task with a push config that the node's restart cut is resumed by the
// restarted node, and its webhook hears of it to its end, with no client
// connected: push notifications are for the client that is not (they were posted
// by the A2A execution of the process the message came to, which the restart
// ended: the task completed after it, and the webhook never heard so).
func TestA2APushFollowsATaskResumedAfterARestart(t *testing.T) {
	const answer = "resumed and pushed"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hook, task, a2aCfg := pushedTaskCutByAStop(ctx, t, dir, answer)
	second := resumedAndPushedToItsEnd(t, dir, answer, a2aCfg, nil, hook)
	if _, output := recordedAnswer(t, second, task.ContextID); output != answer {
		t.Fatalf("the recorded answer: %q", output)
	}
	oneTaskEnded(t, second, task.ContextID, messages.TypeTaskCompleted)
}

// pushedTaskCutByAStop starts a node on dir whose A2A may push to 127.0.0.1,
// sends it a message, not blocking, whose push config posts to the returned
// hook's /resumed, and stops the node while the task's held tool call is in
// flight. It returns the hook, the task and the node's A2A config (for the node
// that resumes the task).
func pushedTaskCutByAStop(ctx context.Context, t *testing.T, dir, answer string) (*pushHook, *sdk.Task, *node.A2AConfig) {
	t.Helper()
	hook, hookURL := newPushHook(t)
	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	cfg.HandoffGrace = heldCallGrace // the held call never answers on the first node
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking, PushConfig: &sdk.PushConfig{ID: "hook", URL: hookURL + "/resumed"}}})
	if err != nil {
		t.Fatal(err)
	}
	held.waitStarted(t, "before the restart")
	stop()
	return hook, res.(*sdk.Task), cfg.A2A
}

// resumedAndPushedToItsEnd starts a node on dir (and log, unless nil) with
// a2aCfg, which resumes the task pushedTaskCutByAStop left, and returns it once
// hook has heard the task completed.
func resumedAndPushedToItsEnd(t *testing.T, dir, answer string, a2aCfg *node.A2AConfig, log eventlog.Log, hook *pushHook) *node.Node {
	t.Helper()
	before, _ := hook.got("/resumed")
	again := newHeldTool()
	cfg := heldConfig(t, again, answer)
	cfg.DataDir, cfg.A2A = dir, a2aCfg
	if log != nil {
		cfg.Log = log
	}
	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	t.Cleanup(api.Close)
	again.waitStarted(t, "again by the restarted node")
	close(again.release)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		states, _ := hook.got("/resumed")
		if len(states) > 0 && states[len(states)-1] == sdk.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook did not hear of the resumed task's end within 30 s: before the restart it got %v, in all %v", before, states)
		}
	}
	return second
}

// A task that ended while its webhook could not take the end (it answered 503
// until the sender gave up), and then the node stopped: the end is posted by the
// node that starts next, once, and recorded as posted (a2a.push_final), so that
// the one after does not post it again. Before, a node that started followed only
// the tasks that had not ended: the webhook never heard that the task did.
func TestA2APushPostsAnEndTheStopCut(t *testing.T) {
	const answer = "ended while the hook was down"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var down atomic.Bool
	var mu sync.Mutex
	var refused, taken []sdk.TaskState
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if down.Load() {
			refused = append(refused, task.Status.State)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		taken = append(taken, task.Status.State)
	}))
	defer hook.Close()
	got := func() (refusedEnds int, takenStates []sdk.TaskState) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range refused {
			if s == sdk.TaskStateCompleted {
				refusedEnds++
			}
		}
		return refusedEnds, append([]sdk.TaskState(nil), taken...)
	}

	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking, PushConfig: &sdk.PushConfig{ID: "hook", URL: hook.URL + "/ended"}}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	held.waitStarted(t, "before the stop")
	down.Store(true)
	close(held.release)
	// The sender tries the end four times, then gives up: only then does the
	// webhook come back, so that none but the next node can post it.
	for {
		if n, _ := got(); n >= 4 {
			break
		}
		select {
		case <-ctx.Done():
			n, states := got()
			t.Fatalf("the webhook was not tried with the task's end four times: %d (it took %v)", n, states)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	down.Store(false)
	_, before := got()
	if slices.Contains(before, sdk.TaskStateCompleted) {
		t.Fatalf("the webhook took the end while it was down: %v", before)
	}

	cfg2 := heldConfig(t, newHeldTool(), answer)
	cfg2.DataDir, cfg2.A2A = dir, cfg.A2A
	second := nodetest.Start(t, cfg2)
	api := httptest.NewServer(second.Handler()) // as node serve does: the A2A server starts with its routes
	defer api.Close()
	for {
		_, states := got()
		if slices.Contains(states, sdk.TaskStateCompleted) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the webhook did not hear of the task's end from the node that started after it: it took %v", states)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, output := recordedAnswer(t, second, task.ContextID); output != answer {
		t.Fatalf("the recorded answer: %q", output)
	}
	// The end is recorded as posted, once.
	for {
		events, err := second.Log().Read(ctx, a2a.PushStreamFor(task.ID), 1)
		if err != nil {
			t.Fatal(err)
		}
		finals := 0
		for _, e := range events {
			if e.Type != messages.TypeA2APushFinal {
				continue
			}
			if p, err := e.Decode(); err == nil && p.(*messages.A2APushFinal).Holder == "" { // not a lease
				finals++
			}
		}
		if finals > 1 {
			t.Fatalf("the end is recorded as posted %d times", finals)
		}
		if finals == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the end posted is not recorded as posted in the task's push stream")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A push config set for a task that ended is sent the task's end at once: no
// update follows an end, and the webhook heard nothing for good before (a client
// that sets its webhook late, or again after a restart of its own).
func TestA2APushConfigSetOnAnEndedTaskHearsItsEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hook, hookURL := newPushHook(t)
	held := newHeldTool()
	close(held.release)
	cfg := heldConfig(t, held, "done before the webhook")
	cfg.DataDir = t.TempDir()
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	url, _ := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("go")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("the task is %s, want completed", task.Status.State)
	}
	if _, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: task.ID, Config: sdk.PushConfig{ID: "late", URL: hookURL + "/late"}}); err != nil {
		t.Fatal(err)
	}
	for {
		if states, _ := hook.got("/late"); slices.Contains(states, sdk.TaskStateCompleted) {
			if len(states) != 1 {
				t.Fatalf("the webhook got %v, want the end once", states)
			}
			return
		}
		select {
		case <-ctx.Done():
			states, _ := hook.got("/late")
			t.Fatalf("a config set on an ended task heard nothing of its end: %v", states)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
