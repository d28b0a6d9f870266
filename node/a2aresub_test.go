package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// a2aNodeToStop starts a node of cfg serving A2A over HTTP, the first node of a
// restart, and returns its base URL and the function that stops both (once; at the
// test's end if not before).
// twoTasksRestarted is what restartAfterTwoTasks leaves: the tasks it made before
// the restart, and the node after it with A2A clients of its default and mailer
// agents.
type twoTasksRestarted struct {
	client, mailer *a2aclient.Client
	done, waiting  *sdk.Task
	second         *node.Node
	url            string
}

// restartAfterTwoTasks starts a node of cfg (whose agent mailer waits for the
// approval of an email), sends question to its default agent (a task that
// completes) and "mail bob" to mailer (a task that waits for input), stops the node
// and starts another on the same data, with an HTTP server of its own.
func restartAfterTwoTasks(ctx context.Context, t *testing.T, cfg node.Config, question *sdk.Message) twoTasksRestarted {
	t.Helper()
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	mailerClient, _ := a2aClient(t, url, "/a2a/mailer"+a2a.CardPath)
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: question})
	if err != nil {
		t.Fatal(err)
	}
	done := res.(*sdk.Task)
	res, err = mailerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	waiting := res.(*sdk.Task)
	if done.Status.State != sdk.TaskStateCompleted || waiting.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("before the restart: %s, %s", done.Status.State, waiting.Status.State)
	}
	stop()

	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	t.Cleanup(api.Close)
	r := twoTasksRestarted{done: done, waiting: waiting, second: second, url: api.URL}
	r.client, _ = a2aClient(t, api.URL, a2a.CardPath)
	r.mailer, _ = a2aClient(t, api.URL, "/a2a/mailer"+a2a.CardPath)
	return r
}

func a2aNodeToStop(t *testing.T, cfg node.Config) (string, func()) {
	t.Helper()
	n, stop := nodetest.StartWithStop(t, cfg)
	api := httptest.NewServer(n.Handler())
	var once sync.Once
	end := func() { once.Do(func() { api.Close(); stop() }) }
	t.Cleanup(end)
	return api.URL, end
}

// heldTool ("hold") waits until released, or until its context ends.
type heldTool struct {
	started chan string
	release chan struct{}
}

func newHeldTool() *heldTool {
	return &heldTool{started: make(chan string, 16), release: make(chan struct{})}
}

func (h *heldTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "hold", Description: "waits until released", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (h *heldTool) Call(ctx context.Context, c tools.Call) (string, error) {
	h.started <- c.Key
	select {
	case <-h.release:
		return "released", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// waitStarted waits until the held tool is called.
func (h *heldTool) waitStarted(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the held tool was not called %s", what)
	}
}

// a2aItem is an event of a stream, or its error.
type a2aItem struct {
	ev  sdk.Event
	err error
}

// a2aFeed runs a stream of events into a channel, closed when the stream ends
// (after an error, if any).
func a2aFeed(seq iter.Seq2[sdk.Event, error]) <-chan a2aItem {
	out := make(chan a2aItem, 4096)
	go func() {
		defer close(out)
		for ev, err := range seq {
			out <- a2aItem{ev, err}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// nextItem returns the feed's next item, and false when the feed ended.
func nextItem(t *testing.T, feed <-chan a2aItem, within time.Duration) (a2aItem, bool) {
	t.Helper()
	select {
	case it, ok := <-feed:
		return it, ok
	case <-time.After(within):
		t.Fatalf("no event within %s", within)
		return a2aItem{}, false
	}
}

// drainFeed reads the feed to its end; an error fails the test.
func drainFeed(t *testing.T, feed <-chan a2aItem) []sdk.Event {
	t.Helper()
	var out []sdk.Event
	for {
		it, ok := nextItem(t, feed, 30*time.Second)
		if !ok {
			return out
		}
		if it.err != nil {
			t.Fatalf("after %d events: %v", len(out), it.err)
		}
		out = append(out, it.ev)
	}
}

// foldAnswer is what a client folding the events' answer artifact shows at the
// end, whether the last artifact event is the last chunk, how many events appended,
// and the last status.
func foldAnswer(events []sdk.Event) (text string, lastChunk bool, appended int, last *sdk.TaskStatusUpdateEvent) {
	for _, ev := range events {
		switch v := ev.(type) {
		case *sdk.TaskArtifactUpdateEvent:
			part := partsOf(&sdk.Message{Parts: v.Artifact.Parts})
			if v.Append {
				text += part
				appended++
			} else {
				text = part
			}
			lastChunk = v.LastChunk
		case *sdk.TaskStatusUpdateEvent:
			last = v
		}
	}
	return text, lastChunk, appended, last
}

// heldConfig is a node whose agent calls the held tool, then answers text,
// streamed in pieces of 4 bytes.
func heldConfig(t *testing.T, held *heldTool, text string) node.Config {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", StreamChunk: 4, Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "hold", Arguments: "{}"}}},
		{Content: text},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return node.Config{Model: m, Tools: []tools.Tool{held}, A2A: &node.A2AConfig{}}
}

// A task whose tool call the node's restart cut: the restarted node resumes it, and
// a tasks/resubscribe to it there (and its message sent again with message/stream)
// gets the task (working) at once, then, as the call comes back, the answer
// streamed into its artifact and the task's end; once
// ended, a resubscription gets the completed task and ends; an unknown task is
// not found.
func TestA2AResubscribeFollowsATaskAfterARestart(t *testing.T) {
	const answer = "the held call came back, and so did the stream"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.HandoffGrace = heldCallGrace // the held call never answers on the first node
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	msg := userMessage("hold on")
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg, Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	held.waitStarted(t, "before the restart")
	stop()

	again := newHeldTool()
	cfg = heldConfig(t, again, answer)
	cfg.DataDir = dir
	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	again.waitStarted(t, "again by the restarted node")
	client, _ = a2aClient(t, api.URL, a2a.CardPath)

	feed := a2aFeed(client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: task.ID}))
	it, ok := nextItem(t, feed, 30*time.Second)
	if !ok || it.err != nil {
		t.Fatalf("tasks/resubscribe after the restart: %v", it.err)
	}
	if got, isTask := it.ev.(*sdk.Task); !isTask || got.ID != task.ID || got.Status.State != sdk.TaskStateWorking {
		t.Fatalf("the first event: %#v, want the task working", it.ev)
	}
	// The message sent again with message/stream (a client retrying its stream)
	// follows the same task.
	retry := userMessage("hold on")
	retry.ID = msg.ID
	retried := a2aFeed(client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: retry}))
	if it, ok := nextItem(t, retried, 30*time.Second); !ok || it.err != nil || it.ev.TaskInfo().TaskID != task.ID {
		t.Fatalf("message/stream sent again: %+v", it)
	}
	close(again.release)
	for name, f := range map[string]<-chan a2aItem{"tasks/resubscribe": feed, "message/stream sent again": retried} {
		text, lastChunk, appended, last := foldAnswer(drainFeed(t, f))
		if last == nil || !last.Final || last.Status.State != sdk.TaskStateCompleted || partsOf(last.Status.Message) != answer {
			t.Fatalf("%s ended with %#v", name, last)
		}
		if text != answer || !lastChunk || appended < 5 {
			t.Fatalf("%s: the answer artifact %q (last chunk %v), %d increments appended; want the answer streamed", name, text, lastChunk, appended)
		}
	}

	// Ended: the task as it ended, and the end of the stream.
	events := drainFeed(t, a2aFeed(client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: task.ID})))
	if len(events) != 1 {
		t.Fatalf("tasks/resubscribe of the completed task: %d events, want the task", len(events))
	}
	if done, isTask := events[0].(*sdk.Task); !isTask || done.Status.State != sdk.TaskStateCompleted || artifactText(t, done) != answer {
		t.Fatalf("tasks/resubscribe of the completed task: %#v", events[0])
	}
	unknown := sdk.TaskID(task.ContextID + "~0123456789abcdef0123456789abcdef")
	for _, id := range []sdk.TaskID{unknown, "no-such-task"} {
		for _, err := range client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: id}) {
			if !errors.Is(err, sdk.ErrTaskNotFound) {
				t.Fatalf("tasks/resubscribe of unknown task %s: %v, want task not found", id, err)
			}
		}
	}
}

// v1Result is an A2A 1.0 stream's event ({"task"}, {"statusUpdate"},
// {"artifactUpdate"}), or its JSON-RPC error.
type v1Result struct {
	result map[string]any
	code   int
	msg    string
}

// v1Subscribe calls A2A 1.0's SubscribeToTask on the endpoint at url, with the
// A2A-Version header, and feeds the stream's events.
func v1Subscribe(t *testing.T, ctx context.Context, url string, id sdk.TaskID) <-chan v1Result {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":%q}}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(a2a.VersionHeader, "1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan v1Result, 4096)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var r struct {
				Result map[string]any `json:"result"`
				Error  *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				out <- v1Result{code: -1, msg: "undecodable event " + data}
				return
			}
			if r.Error != nil {
				out <- v1Result{code: r.Error.Code, msg: r.Error.Message}
				return
			}
			out <- v1Result{result: r.Result}
		}
	}()
	return out
}

// nextV1 returns the stream's next event, and false when it ended.
func nextV1(t *testing.T, feed <-chan v1Result) (v1Result, bool) {
	t.Helper()
	select {
	case r, ok := <-feed:
		return r, ok
	case <-time.After(30 * time.Second):
		t.Fatal("no 1.0 event within 30s")
		return v1Result{}, false
	}
}

// v1State is the state of a 1.0 event's task or status ("" for an artifact).
func v1State(r v1Result) string {
	for _, k := range []string{"task", "statusUpdate"} {
		if v, ok := r.result[k].(map[string]any); ok {
			st, _ := v["status"].(map[string]any)
			s, _ := st["state"].(string)
			return s
		}
	}
	return ""
}

// Tasks after a restart, as 0.3's tasks/resubscribe and 1.0's SubscribeToTask see
// them: a completed task is yielded (0.3) or refused as ended (1.0:
// UnsupportedOperationError); a task waiting for approval is yielded as it waits
// (0.3: input-required ends the stream, as in message/stream), or (1.0, which
// streams to the end) reported waiting, then followed when another client
// approves it, to its completion; an unknown task is not found in both.
func TestA2ASubscribeAfterARestart(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{}
	cfg.DataDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rs := restartAfterTwoTasks(ctx, t, cfg, userMessage("hi"))
	client, mailerClient, done, waiting := rs.client, rs.mailer, rs.done, rs.waiting

	// 0.3.
	events := drainFeed(t, a2aFeed(client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: done.ID})))
	if len(events) != 1 {
		t.Fatalf("0.3, the completed task: %d events", len(events))
	}
	if got, ok := events[0].(*sdk.Task); !ok || got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != "handled" {
		t.Fatalf("0.3, the completed task: %#v", events[0])
	}
	events = drainFeed(t, a2aFeed(mailerClient.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: waiting.ID})))
	if len(events) != 1 {
		t.Fatalf("0.3, the waiting task: %d events", len(events))
	}
	if got, ok := events[0].(*sdk.Task); !ok || got.Status.State != sdk.TaskStateInputRequired || !strings.Contains(partsOf(got.Status.Message), "send_email") {
		t.Fatalf("0.3, the waiting task: %#v", events[0])
	}

	// 1.0.
	if r, _ := nextV1(t, v1Subscribe(t, ctx, rs.url+"/a2a", done.ID)); r.code != -32004 {
		t.Fatalf("1.0, the completed task: %+v, want UnsupportedOperationError (-32004)", r)
	}
	unknown := sdk.TaskID(done.ContextID + "~0123456789abcdef0123456789abcdef")
	if r, _ := nextV1(t, v1Subscribe(t, ctx, rs.url+"/a2a", unknown)); r.code != -32001 {
		t.Fatalf("1.0, an unknown task: %+v, want TaskNotFoundError (-32001)", r)
	}
	for _, err := range client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: unknown}) {
		if !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Fatalf("0.3, an unknown task: %v", err)
		}
	}
	feed := v1Subscribe(t, ctx, rs.url+"/a2a/mailer", waiting.ID)
	r, _ := nextV1(t, feed)
	if v1State(r) != "TASK_STATE_INPUT_REQUIRED" || r.result["task"] == nil {
		t.Fatalf("1.0, the waiting task's first event: %+v", r)
	}
	before := sent.Load() // the default agent sent one without approval
	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = waiting.ID, waiting.ContextID
	if _, err := mailerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: answer}); err != nil {
		t.Fatal(err)
	}
	var states []string
	var artifact string
	for {
		r, ok := nextV1(t, feed)
		if !ok {
			break
		}
		if r.code != 0 {
			t.Fatalf("1.0 stream error: %+v", r)
		}
		if s := v1State(r); s != "" {
			states = append(states, s)
		}
		if a, ok := r.result["artifactUpdate"].(map[string]any); ok {
			b, _ := json.Marshal(a["artifact"])
			artifact = string(b)
		}
	}
	if len(states) < 2 || states[0] != "TASK_STATE_WORKING" || states[len(states)-1] != "TASK_STATE_COMPLETED" {
		t.Fatalf("1.0, the waiting task approved: states %v, want working … completed", states)
	}
	if !strings.Contains(artifact, `"handled"`) {
		t.Fatalf("1.0, the answer artifact: %s", artifact)
	}
	if sent.Load() != before+1 {
		t.Fatalf("%d emails sent on approval, want 1", sent.Load()-before)
	}
}

// A 1.0 SubscribeToTask streams to the task's end: a task that comes to wait for
// approval while followed is reported input-required, and, approved by another
// client, working again, then completed — where 0.3's stream ends at input-required.
func TestA2ASubscribeToTaskFollowsThroughAnApproval(t *testing.T) {
	var sent atomic.Int64
	held := newHeldTool()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "hold", Arguments: "{}"}}},
		{ToolCalls: []messages.ToolCall{{ID: "c2", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
		{Content: "mailed"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, base := a2aNode(t, node.Config{Model: model, Tools: []tools.Tool{held, emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"hold", "send_email"}, Approvals: []string{"send_email"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold, then mail bob"), Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	held.waitStarted(t, "by the task")

	feed := v1Subscribe(t, ctx, base+"/a2a/mailer", task.ID)
	if r, _ := nextV1(t, feed); v1State(r) != "TASK_STATE_WORKING" || r.result["task"] == nil {
		t.Fatalf("the first event: %+v, want the task working", r)
	}
	close(held.release)
	var states []string
	approved := make(chan error, 1)
	for {
		r, ok := nextV1(t, feed)
		if !ok {
			break
		}
		if r.code != 0 {
			t.Fatalf("after %v: error %+v", states, r)
		}
		s := v1State(r)
		if s == "" || (len(states) > 0 && states[len(states)-1] == s) {
			continue
		}
		states = append(states, s)
		if s == "TASK_STATE_INPUT_REQUIRED" {
			answer := userMessage("approve")
			answer.TaskID, answer.ContextID = task.ID, task.ContextID
			go func() {
				_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: answer})
				approved <- err
			}()
		}
	}
	want := "TASK_STATE_WORKING TASK_STATE_INPUT_REQUIRED TASK_STATE_WORKING TASK_STATE_COMPLETED"
	if got := strings.Join(states, " "); !strings.HasSuffix(got, want) {
		t.Fatalf("states %q, want … %q", got, want)
	}
	if err := <-approved; err != nil {
		t.Fatalf("the approval: %v", err)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1", sent.Load())
	}
}
