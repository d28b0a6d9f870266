package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// a2aStreamingNode starts a node serving A2A whose model is a fake OpenAI-compatible
// provider: the n-th request (from 0) gets streams(n); the gateway makes at most
// attempts attempts, a millisecond apart.
func a2aStreamingNode(t *testing.T, attempts int, streams func(n int) openaitest.Reply) (*node.Node, string) {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		mu.Lock()
		i := calls
		calls++
		mu.Unlock()
		return streams(i)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a2aNode(t, node.Config{Model: m, Gateway: gateway.Config{
		Retry: gateway.RetryPolicy{MaxAttempts: attempts, Initial: time.Millisecond, Max: time.Millisecond}}})
}

// a2aStreamed is what an A2A client saw of a message/stream: the artifact events, the
// answer artifact's text as a client folds them (append or replace), the text after
// each event, and the last event.
type a2aStreamed struct {
	artifacts []*sdk.TaskArtifactUpdateEvent
	texts     []string // the answer artifact's text after each artifact event
	final     *sdk.TaskStatusUpdateEvent
	taskID    sdk.TaskID
	contextID string
	log       []string // the events' types
}

// streamMessage sends text with message/stream and reads the stream to its end.
func streamMessage(t *testing.T, base, text string) a2aStreamed {
	t.Helper()
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out a2aStreamed
	var shown string
	for ev, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: userMessage(text)}) {
		if err != nil {
			t.Fatal(err)
		}
		out.taskID, out.contextID = ev.TaskInfo().TaskID, ev.TaskInfo().ContextID
		out.log = append(out.log, fmt.Sprintf("%T", ev))
		switch v := ev.(type) {
		case *sdk.TaskArtifactUpdateEvent:
			if v.Artifact.Name != a2a.AnswerArtifact {
				t.Fatalf("artifact %q, want %q", v.Artifact.Name, a2a.AnswerArtifact)
			}
			if len(out.artifacts) > 0 && v.Artifact.ID != out.artifacts[0].Artifact.ID {
				t.Fatalf("a second artifact %s: want one answer artifact", v.Artifact.ID)
			}
			if v.Append {
				shown += partsOf(&sdk.Message{Parts: v.Artifact.Parts})
			} else {
				shown = partsOf(&sdk.Message{Parts: v.Artifact.Parts})
			}
			out.artifacts = append(out.artifacts, v)
			out.texts = append(out.texts, shown)
		case *sdk.TaskStatusUpdateEvent:
			if v.Final {
				out.final = v
			}
		}
	}
	if out.final == nil {
		t.Fatal("the stream ended without a final status")
	}
	return out
}

// recordedAnswer returns the session's recorded model answers and the task's output
// (TaskCompleted), read from the log.
func recordedAnswer(t *testing.T, n *node.Node, session string) (answers []*messages.ModelResponded, output string) {
	t.Helper()
	events, err := n.Log().Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch v := p.(type) {
		case *messages.ModelDelta:
			t.Fatalf("the log holds a delta: %s", e.Payload)
		case *messages.ModelResponded:
			answers = append(answers, v)
		case *messages.TaskCompleted:
			output = v.Output
		}
	}
	return answers, output
}

// A provider streaming 100 tokens: an A2A message/stream client sees them in order as
// increments of one answer artifact (the first replaces, the others append), then
// the recorded answer, whole, as the artifact's last chunk and the completed
// status's message; tasks/get has that one artifact.
func TestA2AStreamCarriesModelDeltas(t *testing.T) {
	pieces := tokens(100)
	n, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	got := streamMessage(t, base, "count to 100")
	if len(got.artifacts) < 102 {
		t.Fatalf("%d artifact events, want 100 deltas, the recorded answer and the last chunk; events: %v", len(got.artifacts), got.log)
	}
	for i, p := range pieces {
		a := got.artifacts[i]
		if text := partsOf(&sdk.Message{Parts: a.Artifact.Parts}); text != p || a.Append != (i > 0) || a.LastChunk {
			t.Fatalf("artifact event %d: %q append %v last %v, want %q append %v", i, text, a.Append, a.LastChunk, p, i > 0)
		}
		if partial, _ := a.Artifact.Metadata[a2a.PartialKey].(bool); partial != (i == 0) {
			t.Fatalf("artifact event %d: metadata %v", i, a.Artifact.Metadata)
		}
	}
	answers, output := recordedAnswer(t, n, got.contextID)
	whole := strings.Join(pieces, "")
	if len(answers) != 1 || answers[0].Message.Content != whole || output == "" || !strings.HasPrefix(whole, output) {
		t.Fatalf("recorded: %d answers, output %q", len(answers), output)
	}
	if got.texts[99] != whole {
		t.Fatalf("the streamed text: %q", got.texts[99])
	}
	last := got.artifacts[len(got.artifacts)-1]
	if !last.LastChunk || last.Append || got.texts[len(got.texts)-1] != output {
		t.Fatalf("last artifact event: append %v last %v, text %q, want %q", last.Append, last.LastChunk, got.texts[len(got.texts)-1], output)
	}
	if got.final.Status.State != sdk.TaskStateCompleted || partsOf(got.final.Status.Message) != output {
		t.Fatalf("final status %s: %q", got.final.Status.State, partsOf(got.final.Status.Message))
	}
	client, _ := a2aClient(t, base, a2a.CardPath)
	task, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: got.taskID})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Artifacts) != 1 || artifactText(t, task) != output || task.Artifacts[0].Metadata[a2a.PartialKey] != nil {
		t.Fatalf("tasks/get: %d artifacts, %q, metadata %v", len(task.Artifacts), artifactText(t, task), task.Artifacts[0].Metadata)
	}
}

// A stream cut mid-answer and retried: the retry's first delta (Reset) replaces
// the cut attempt's text, so the artifact shows the retry's text only, and ends as
// the one recorded answer.
func TestA2AStreamResetReplacesTheCutAttempt(t *testing.T) {
	pieces := tokens(100)
	n, base := a2aStreamingNode(t, 3, func(i int) openaitest.Reply {
		if i == 0 {
			return cutStream(pieces[:50])
		}
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	got := streamMessage(t, base, "count to 100")
	if got.final.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("final status %s: %q", got.final.Status.State, partsOf(got.final.Status.Message))
	}
	if len(got.artifacts) < 152 {
		t.Fatalf("%d artifact events, want 150 deltas, the recorded answer and the last chunk", len(got.artifacts))
	}
	if a := got.artifacts[50]; a.Append || partsOf(&sdk.Message{Parts: a.Artifact.Parts}) != pieces[0] {
		t.Fatalf("the retry's first delta: append %v %q", a.Append, partsOf(&sdk.Message{Parts: a.Artifact.Parts}))
	}
	whole := strings.Join(pieces, "")
	if got.texts[49] != strings.Join(pieces[:50], "") || got.texts[149] != whole {
		t.Fatalf("streamed text: after the cut attempt %q, after the retry %q", got.texts[49], got.texts[149])
	}
	answers, output := recordedAnswer(t, n, got.contextID)
	if len(answers) != 1 || answers[0].Message.Content != whole || got.texts[len(got.texts)-1] != output {
		t.Fatalf("recorded %d answers; the artifact ends as %q, the output is %q", len(answers), got.texts[len(got.texts)-1], output)
	}
}

// When every attempt is cut, the task fails and its answer artifact is emptied: no
// half answer stays.
func TestA2AStreamFailedCallLeavesNoText(t *testing.T) {
	pieces := tokens(40)
	_, base := a2aStreamingNode(t, 2, func(int) openaitest.Reply { return cutStream(pieces[:20]) })
	got := streamMessage(t, base, "count")
	if got.final.Status.State != sdk.TaskStateFailed {
		t.Fatalf("final status %s", got.final.Status.State)
	}
	if len(got.artifacts) < 40 || got.texts[39] != strings.Join(pieces[:20], "") {
		t.Fatalf("%d artifact events", len(got.artifacts))
	}
	if last := got.artifacts[len(got.artifacts)-1]; !last.LastChunk || got.texts[len(got.texts)-1] != "" {
		t.Fatalf("the answer artifact ends as %q (last chunk %v)", got.texts[len(got.texts)-1], last.LastChunk)
	}
	client, _ := a2aClient(t, base, a2a.CardPath)
	task, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: got.taskID})
	if err != nil || task.Status.State != sdk.TaskStateFailed || artifactText(t, task) != "" {
		t.Fatalf("tasks/get: %v, %q", err, artifactText(t, task))
	}
}

// Push notifications follow the recorded answers, not the tokens: no task pushed
// while its artifact holds streamed text, and the completed one has the whole answer.
func TestA2AStreamDoesNotPushEveryToken(t *testing.T) {
	pieces := tokens(100)
	type pushed struct {
		state   sdk.TaskState
		partial bool
		text    string
	}
	got := make(chan pushed, 256)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
			t.Errorf("push body: %v", err)
			return
		}
		p := pushed{state: task.Status.State}
		for _, a := range task.Artifacts {
			p.partial = p.partial || a.Metadata[a2a.PartialKey] == true
			p.text = partsOf(&sdk.Message{Parts: a.Parts})
		}
		got <- p
	}))
	defer hook.Close()
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, base := a2aNode(t, node.Config{Model: m, A2A: &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deltas := 0
	for ev, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: userMessage("count"),
		Config: &sdk.MessageSendConfig{PushConfig: &sdk.PushConfig{URL: hook.URL}}}) {
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := ev.(*sdk.TaskArtifactUpdateEvent); ok && a.Append {
			deltas++
		}
	}
	if deltas < 99 {
		t.Fatalf("%d appended deltas streamed", deltas)
	}
	for n := 0; ; n++ {
		select {
		case p := <-got:
			if p.partial {
				t.Fatalf("a task was pushed with streamed text (%s)", p.state)
			}
			if p.state == sdk.TaskStateCompleted {
				if !strings.HasPrefix(strings.Join(pieces, ""), p.text) || p.text == "" {
					t.Fatalf("the completed task pushed has %q", p.text)
				}
				if n > 10 {
					t.Fatalf("%d pushes before the completed task", n)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("the webhook never got the completed task")
		}
	}
}

// A2A tasks outlive the node: after a restart over the same data, tasks/get answers
// from the sessions' events (a completed task with its answer and question, a task
// waiting for approval with the call it waits for), a message sent again starts no
// second task, and the waiting task takes its approval and completes.
func TestA2ATasksSurviveARestart(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{}
	cfg.DataDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	question := userMessage("hi")
	rs := restartAfterTwoTasks(ctx, t, cfg, question)
	client, mailerClient, done, waiting, second := rs.client, rs.mailer, rs.done, rs.waiting, rs.second

	got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: done.ID})
	if err != nil {
		t.Fatalf("tasks/get of the completed task after the restart: %v", err)
	}
	if got.Status.State != sdk.TaskStateCompleted || got.ContextID != done.ContextID || artifactText(t, got) != artifactText(t, done) ||
		partsOf(got.Status.Message) != "handled" || len(got.History) != 1 || partsOf(got.History[0]) != "hi" {
		t.Fatalf("completed task after the restart: %s %q %q, history %d", got.Status.State, artifactText(t, got), partsOf(got.Status.Message), len(got.History))
	}
	again := userMessage("hi")
	again.ID = question.ID
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: again})
	if err != nil {
		t.Fatal(err)
	}
	if retried := res.(*sdk.Task); retried.ID != done.ID || retried.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("the message sent again: task %s %s, want %s", retried.ID, retried.Status.State, done.ID)
	}
	events, err := second.Log().Read(ctx, done.ContextID, 1)
	if err != nil {
		t.Fatal(err)
	}
	submitted := 0
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			submitted++
		}
	}
	if submitted != 1 {
		t.Fatalf("session %s has %d tasks, want 1", done.ContextID, submitted)
	}

	pending, err := mailerClient.GetTask(ctx, &sdk.TaskQueryParams{ID: waiting.ID})
	if err != nil {
		t.Fatalf("tasks/get of the waiting task after the restart: %v", err)
	}
	if pending.Status.State != sdk.TaskStateInputRequired || !strings.Contains(partsOf(pending.Status.Message), "send_email") {
		t.Fatalf("waiting task after the restart: %s %v", pending.Status.State, pending.Status.Message)
	}
	before := sent.Load()
	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = waiting.ID, waiting.ContextID
	res, err = mailerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatal(err)
	}
	if end := res.(*sdk.Task); end.ID != waiting.ID || end.Status.State != sdk.TaskStateCompleted || artifactText(t, end) != "handled" {
		t.Fatalf("after the approval: %s %s %q", end.ID, end.Status.State, artifactText(t, end))
	}
	if sent.Load() != before+1 {
		t.Fatalf("%d emails sent on approval, want 1", sent.Load()-before)
	}
	if _, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: sdk.TaskID(done.ContextID + "~0123456789abcdef0123456789abcdef")}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("an unknown task of a known session: %v", err)
	}
}

// A message whose task failed before its session recorded it (here: no text) may be
// sent again with the same messageId, and then runs; one that ran is not run again.
func TestA2ARefusedMessageMayBeSentAgain(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "ran"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	empty := sdk.NewMessage(sdk.MessageRoleUser, sdk.FilePart{File: sdk.FileURI{URI: "https://example.com/a.pdf"}})
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: empty})
	if err == nil {
		if task, ok := res.(*sdk.Task); !ok || task.Status.State != sdk.TaskStateFailed || task.Metadata[a2a.ClaimKey] != nil {
			t.Fatalf("a message without text: %+v", res)
		}
	}
	again := userMessage("now with text")
	again.ID = empty.ID
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: again})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != "ran" {
		t.Fatalf("sent again: %s %q", task.Status.State, artifactText(t, task))
	}
	third := userMessage("once more")
	third.ID = empty.ID
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: third})
	if err != nil {
		t.Fatal(err)
	}
	if t3 := res.(*sdk.Task); t3.ID != task.ID || t3.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("sent a third time: %s %s, want %s", t3.ID, t3.Status.State, task.ID)
	}
}
