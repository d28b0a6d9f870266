package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// textGatedModel is a streaming model whose streams stop after their after-th
// increment of text until the test opens gate: reached is closed then.
type textGatedModel struct {
	llm.Model
	s       llm.Streamer
	after   int
	reached chan struct{}
	gate    chan struct{}
}

func newTextGatedModel(m *openai.Model, after int) textGatedModel {
	return textGatedModel{Model: m, s: m, after: after, reached: make(chan struct{}), gate: make(chan struct{})}
}

func (m textGatedModel) Stream(ctx context.Context, r llm.Request, onDelta func(llm.Delta) error) (llm.Response, error) {
	n := 0
	return m.s.Stream(ctx, r, func(d llm.Delta) error {
		err := onDelta(d)
		if d.Content == "" {
			return err
		}
		if n++; n == m.after {
			close(m.reached)
			select {
			case <-m.gate:
			case <-ctx.Done():
			}
		}
		return err
	})
}

// waitReached waits until the model's stream stopped at its gate.
func (m textGatedModel) waitReached(t *testing.T) {
	t.Helper()
	select {
	case <-m.reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("the model call did not stream %d increments with nobody watching its deltas", m.after)
	}
}

// lateFeed reads a watcher of deltas that came during a model call streaming
// pieces until its task ended: the first delta must be the text so far, with
// Reset (gated at after pieces: read before the gate opens), then the deltas
// after it, one per piece, the call's model.responded whole, and the task's end.
// The task's events before the call (which reach a watcher on another node through
// the bus, maybe after it came, and after the deltas) may come anywhere before the
// answer.
func lateFeed(t *testing.T, live <-chan messages.Envelope, m textGatedModel, pieces []string) {
	t.Helper()
	next := func() messages.Envelope {
		t.Helper()
		for {
			select {
			case e, ok := <-live:
				if !ok {
					t.Fatal("the watcher was disconnected")
				}
				if e.Type != messages.TypeTaskSubmitted && e.Type != messages.TypeModelRequested {
					return e
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the watcher got nothing more")
			}
		}
	}
	delta := func(e messages.Envelope) *messages.ModelDelta {
		t.Helper()
		if e.Type != messages.TypeModelDelta {
			t.Fatalf("got %s %s, want a delta", e.Type, e.Payload)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		return p.(*messages.ModelDelta)
	}
	first := delta(next())
	if want := strings.Join(pieces[:m.after], ""); !first.Reset || first.Content != want || first.Seq != uint64(m.after) {
		t.Fatalf("the first delta: %+v, want the text of the first %d increments, with Reset", first, m.after)
	}
	close(m.gate)
	for i := m.after; i < len(pieces); i++ {
		if d := delta(next()); d.Reset || d.Content != pieces[i] || d.Seq != uint64(i+1) || d.Key != first.Key {
			t.Fatalf("delta %d: %+v, want %q", i, d, pieces[i])
		}
	}
	e := next()
	if e.Type != messages.TypeModelResponded || e.CausationID != first.Key {
		t.Fatalf("after the deltas: %s %s", e.Type, e.Payload)
	}
	p, _ := e.Decode()
	if got := p.(*messages.ModelResponded).Message.Content; got != strings.Join(pieces, "") {
		t.Fatalf("the answer: %q", got)
	}
	if e := next(); e.Type != messages.TypeTaskCompleted {
		t.Fatalf("after the answer: %s %s", e.Type, e.Payload)
	}
}

// With Config.StreamUnwatched, a model call whose session nobody watched as it
// started streams all the same: a watcher that comes during it (a user who opens the session's stream while a long
// answer is being written) gets the text so far at once, then each delta after
// it, then the answer, rather than silence until the answer.
func TestWatcherThatComesDuringAnUnwatchedCallGetsItsText(t *testing.T) {
	pieces := tokens(100)
	srv := streamingProvider(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	model := newTextGatedModel(m, 20)
	n := nodetest.Start(t, node.Config{Model: model, StreamUnwatched: true})
	if _, err := n.Submit(context.Background(), node.Task{Input: "count to 100", SessionID: "late"}); err != nil {
		t.Fatal(err)
	}
	model.waitReached(t)
	live, stop := n.WatchDeltas("late")
	defer stop()
	lateFeed(t, live, model, pieces)
}

// In a cluster (kfake) whose owner performs its sessions' model calls, with
// Config.StreamUnwatched: a watcher on
// another node that comes during a call nobody watched as it started is announced to
// the owner, which streams the call onto the bus from then on, its text so far
// first: the watcher gets that text, each delta after it, then the answer.
func TestClusterWatcherThatComesDuringAnUnwatchedCallGetsItsText(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: c.srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	model := newTextGatedModel(m, 20)
	c.model, c.streamUnwatched = model, true
	owner, ownerPub, _ := c.node("owner", node.RoleSessions|node.RoleTools|node.RoleModels, 0)
	c.model = nil
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })

	if _, err := apiNode.Submit(context.Background(), node.Task{Input: "count to 100", SessionID: "cl-late"}); err != nil {
		t.Fatal(err)
	}
	model.waitReached(t)
	if n := ownerPub.msgs.Load(); n != 0 {
		t.Fatalf("the owner published %d messages on %s with nobody watching", n, messages.TopicDeltas)
	}
	live, stop := apiNode.WatchDeltas("cl-late")
	defer stop()
	lateFeed(t, live, model, pieces)
}

// BenchmarkProviderCall is what streaming costs the node against one whole answer
// of 100 tokens from an OpenAI-compatible provider (the fake one, on loopback):
// the cost of streaming every call of the sessions a node runs.
func BenchmarkProviderCall(b *testing.B) {
	pieces := tokens(100)
	u := messages.Usage{PromptTokens: 20, CompletionTokens: 100}
	srv := openaitest.NewServer(b, func(r openaitest.Request) openaitest.Reply {
		if s, _ := r.JSON(b)["stream"].(bool); s {
			return openaitest.TextStream(u, pieces...)
		}
		return openaitest.Completion(messages.ChatMessage{Role: messages.RoleAssistant, Content: strings.Join(pieces, "")}, u)
	})
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "count to 100"}}}
	b.Run("generate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Generate(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Stream(context.Background(), req, func(llm.Delta) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
