package node_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// In a cluster of an owner of sessions, a node performing model calls and a node
// serving the API (A2A; the tools role, not the sessions one): an A2A message/stream
// client of the API node sees the 100 tokens the provider streams to the performer
// as increments of the answer artifact, in order, then the recorded answer, whole,
// and the task's end.
func TestClusterA2AStreamCarriesModelDeltas(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	c.a2a = &node.A2AConfig{}
	owner, _, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	_, perfPub, _ := c.node("models", node.RoleModels, 0)
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	defer api.Close()

	got := streamMessage(t, api.URL, "count to 100")
	whole := strings.Join(pieces, "")
	if len(got.artifacts) < 102 {
		t.Fatalf("%d artifact events, want 100 deltas, the recorded answer and the last chunk; events: %v", len(got.artifacts), got.log)
	}
	for i, p := range pieces {
		a := got.artifacts[i]
		if text := partsOf(&sdk.Message{Parts: a.Artifact.Parts}); text != p || a.Append != (i > 0) || a.LastChunk {
			t.Fatalf("artifact event %d: %q append %v last %v, want %q append %v", i, text, a.Append, a.LastChunk, p, i > 0)
		}
	}
	if got.texts[99] != whole {
		t.Fatalf("the streamed text: %q", got.texts[99])
	}
	answers, output := recordedAnswer(t, apiNode, got.contextID)
	if len(answers) != 1 || answers[0].Message.Content != whole || output == "" || !strings.HasPrefix(whole, output) {
		t.Fatalf("recorded: %d answers, output %q", len(answers), output)
	}
	last := got.artifacts[len(got.artifacts)-1]
	if !last.LastChunk || last.Append || got.texts[len(got.texts)-1] != output {
		t.Fatalf("last artifact event: append %v last %v, text %q, want %q", last.Append, last.LastChunk, got.texts[len(got.texts)-1], output)
	}
	if got.final.Status.State != sdk.TaskStateCompleted || partsOf(got.final.Status.Message) != output {
		t.Fatalf("final status %s: %q", got.final.Status.State, partsOf(got.final.Status.Message))
	}
	if n := perfPub.msgs.Load(); n == 0 || n > 20 {
		t.Errorf("the performer published %d messages on %s for 100 deltas: want a few batches", n, messages.TopicDeltas)
	}
}

// In the same cluster with a second API node: a task streamed through the first
// (its client still reading), whose agent waits on a tool, is followed by a
// tasks/resubscribe on the second, which neither owns its session nor runs its A2A
// execution: the task (working) at once; once the tool answers, the provider's
// tokens as increments of the answer artifact, then the recorded answer and the
// task's end, as the first client sees them.
func TestClusterA2AResubscribeOnANodeThatDoesNotRunTheTask(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(n int) openaitest.Reply {
		u := messages.Usage{PromptTokens: 20, CompletionTokens: 100}
		if n == 0 {
			return openaitest.Stream(openaitest.RoleChunk(), openaitest.ToolCallChunk(0, "c1", "hold", "{}"),
				openaitest.FinishChunk("tool_calls"), openaitest.UsageChunk(u), openaitest.Done)
		}
		return openaitest.TextStream(u, pieces...)
	})
	held := newHeldTool()
	c.a2a, c.tools = &node.A2AConfig{}, []tools.Tool{held}
	api, other := startA2ACluster(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	streaming, _ := a2aClient(t, api.URL, a2a.CardPath)
	first := a2aFeed(streaming.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: userMessage("count to 100")}))
	it, ok := nextItem(t, first, 30*time.Second)
	if !ok || it.err != nil {
		t.Fatalf("message/stream: %v", it.err)
	}
	id := it.ev.TaskInfo().TaskID
	held.waitStarted(t, "by the task")
	subscriber, _ := a2aClient(t, other.URL, a2a.CardPath)
	feed := a2aFeed(subscriber.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: id}))
	it, ok = nextItem(t, feed, 30*time.Second)
	if !ok || it.err != nil {
		t.Fatalf("tasks/resubscribe on the other node: %v", it.err)
	}
	if task, isTask := it.ev.(*sdk.Task); !isTask || task.ID != id || task.Status.State != sdk.TaskStateWorking {
		t.Fatalf("the first event: %#v, want the task working", it.ev)
	}
	close(held.release)
	events := drainFeed(t, feed)
	streamed := drainFeed(t, first)
	text, lastChunk, appended, last := foldAnswer(events)
	want, _, _, end := foldAnswer(streamed)
	whole := strings.Join(pieces, "")
	if end == nil || end.Status.State != sdk.TaskStateCompleted || want == "" || !strings.HasPrefix(whole, want) {
		t.Fatalf("message/stream ended with %#v, answer %q", end, want)
	}
	if last == nil || !last.Final || last.Status.State != sdk.TaskStateCompleted || partsOf(last.Status.Message) != want {
		t.Fatalf("tasks/resubscribe ended with %#v", last)
	}
	// Every token, in order (the answer waits for its call's last deltas), then
	// the answer.
	live, increments := streamedText(t, events, whole)
	if text != want || !lastChunk || appended != len(pieces)-1 || increments != len(pieces) || live != whole {
		t.Fatalf("tasks/resubscribe's answer artifact: %q (last chunk %v), %d increments, %d appended (%q), want the %d tokens then %q",
			text, lastChunk, increments, appended, live, len(pieces), want)
	}
}

// streamedText is the text a client shows of the increments of the answer
// artifact (partial: before the recorded answer replaces it), and how many there
// were; the text shown after each is a beginning of whole (nothing twice, no gap).
func streamedText(t *testing.T, events []sdk.Event, whole string) (string, int) {
	t.Helper()
	var live string
	n := 0
	for _, ev := range events {
		a, ok := ev.(*sdk.TaskArtifactUpdateEvent)
		if !ok || !a.Append && a.Artifact.Metadata[a2a.PartialKey] != true {
			continue
		}
		n++
		if !a.Append {
			live = ""
		}
		live += partsOf(&sdk.Message{Parts: a.Artifact.Parts})
		if !strings.HasPrefix(whole, live) {
			t.Fatalf("after %d increments the text is %q: not the answer's beginning", n, live)
		}
	}
	return live, n
}

// A client whose message/stream broke mid-answer resubscribes on another API node,
// which neither runs the task nor performs its model call and had no watcher of
// it: it gets the answer's text so far at once (from the node performing the call,
// which streams it onto the bus for the first client), then the tokens that follow,
// in order, nothing twice, then the recorded answer and the task's end. The
// provider's stream stops after 30 tokens until the subscriber got the text so far.
func TestClusterA2AResubscribeMidAnswer(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: c.srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	model := newTextGatedModel(m, 30)
	c.a2a, c.model = &node.A2AConfig{}, model
	api, other := startA2ACluster(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	streaming, _ := a2aClient(t, api.URL, a2a.CardPath)
	firstCtx, cut := context.WithCancel(ctx)
	defer cut()
	first := a2aFeed(streaming.SendStreamingMessage(firstCtx, &sdk.MessageSendParams{Message: userMessage("count to 100")}))
	var id sdk.TaskID
	for increments := 0; increments < 20; {
		it, ok := nextItem(t, first, 30*time.Second)
		if !ok || it.err != nil {
			t.Fatalf("message/stream after %d increments: %v", increments, it.err)
		}
		id = it.ev.TaskInfo().TaskID
		if a, isArtifact := it.ev.(*sdk.TaskArtifactUpdateEvent); isArtifact && a.Append {
			increments++
		}
	}
	cut() // the first client goes away mid-answer
	model.waitReached(t)

	subscriber, _ := a2aClient(t, other.URL, a2a.CardPath)
	feed := a2aFeed(subscriber.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: id}))
	var events []sdk.Event
	var caughtUp string
	for caughtUp == "" {
		it, ok := nextItem(t, feed, 30*time.Second)
		if !ok || it.err != nil {
			t.Fatalf("tasks/resubscribe after %d events: %v", len(events), it.err)
		}
		events = append(events, it.ev)
		if a, isArtifact := it.ev.(*sdk.TaskArtifactUpdateEvent); isArtifact {
			caughtUp = partsOf(&sdk.Message{Parts: a.Artifact.Parts})
		}
	}
	close(model.gate)
	events = append(events, drainFeed(t, feed)...)
	whole := strings.Join(pieces, "")
	text, lastChunk, _, last := foldAnswer(events)
	if last == nil || !last.Final || last.Status.State != sdk.TaskStateCompleted || text == "" || !strings.HasPrefix(whole, text) || !lastChunk {
		t.Fatalf("tasks/resubscribe ended with %#v, answer %q", last, text)
	}
	live, increments := streamedText(t, events, whole)
	if live != whole || caughtUp != strings.Join(pieces[:30], "") {
		t.Fatalf("tasks/resubscribe mid-answer: %d increments, the first %q, then %q; want the first 30 tokens at once, then the others", increments, caughtUp, live)
	}
}

// startA2ACluster starts c's nodes for the A2A cluster tests: "owner" runs every
// session and the tools, "models" the model calls, "api" and "other" only serve
// A2A; it returns the HTTP servers of the last two once owner owns every partition.
func startA2ACluster(t *testing.T, c *deltaCluster) (api, other *httptest.Server) {
	t.Helper()
	owner, _, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	c.node("models", node.RoleModels, 0)
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	otherNode, _, _ := c.node("other", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api = httptest.NewServer(apiNode.Handler())
	t.Cleanup(api.Close)
	other = httptest.NewServer(otherNode.Handler())
	t.Cleanup(other.Close)
	return api, other
}
