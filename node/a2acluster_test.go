package node_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
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
