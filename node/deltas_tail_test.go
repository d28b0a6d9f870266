package node_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// deltasFeedSubscriber is a node's live subscriber whose troupe.deltas messages go
// through feed (deltaCluster.deltasFeed).
type deltasFeedSubscriber struct {
	message.Subscriber
	feed func(ctx context.Context, in <-chan *message.Message) <-chan *message.Message
}

func (s deltasFeedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ch, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil || topic != messages.TopicDeltas {
		return ch, err
	}
	return s.feed(ctx, ch), nil
}

// delayedFeed hands on each message d after it was read, in order: a troupe.deltas
// that lags behind troupe.events by d.
func delayedFeed(d time.Duration) func(context.Context, <-chan *message.Message) <-chan *message.Message {
	return func(ctx context.Context, in <-chan *message.Message) <-chan *message.Message {
		type due struct {
			msg *message.Message
			at  time.Time
		}
		queue := make(chan due, 4096)
		out := make(chan *message.Message)
		go func() {
			defer close(queue)
			for msg := range in {
				c := msg.Copy()
				msg.Ack()
				select {
				case queue <- due{c, time.Now().Add(d)}:
				case <-ctx.Done():
					return
				}
			}
		}()
		go func() {
			defer close(out)
			for x := range queue {
				select {
				case <-time.After(time.Until(x.at)):
				case <-ctx.Done():
					return
				}
				select {
				case out <- x.msg:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
}

// droppingFeed drops the batches for which drop is true: a bus that loses some.
func droppingFeed(drop func(messages.DeltaBatch) bool) func(context.Context, <-chan *message.Message) <-chan *message.Message {
	return func(ctx context.Context, in <-chan *message.Message) <-chan *message.Message {
		out := make(chan *message.Message)
		go func() {
			defer close(out)
			for msg := range in {
				if b, err := messages.DecodeDeltaBatch(msg.Payload); err == nil && drop(b) {
					msg.Ack()
					continue
				}
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
}

// startDeltaCluster starts an owner of sessions (no models role), a models node and
// an API node (started last, with c's deltasFeed), and serves the API node's HTTP.
func startDeltaCluster(t *testing.T, c *deltaCluster, apiFeed func(context.Context, <-chan *message.Message) <-chan *message.Message) (*node.Node, string) {
	t.Helper()
	owner, _, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	c.node("models", node.RoleModels, 0)
	c.deltasFeed = apiFeed
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	c.deltasFeed = nil
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	t.Cleanup(api.Close)
	return apiNode, api.URL
}

// The tail of a streamed answer reaches a watcher on another node after the answer
// itself (the API node reads troupe.deltas 300 ms late: the model.responded on
// troupe.events overtakes the last batches): the watcher's stream still has every
// delta, in order, before the answer, which waits for the call's last batch (its
// end).
func TestClusterWatcherGetsTheTailOfABurstBeforeTheAnswer(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	c.pace = 3 * time.Millisecond // 100 tokens in about 300 ms: a dozen batches
	apiNode, base := startDeltaCluster(t, c, delayedFeed(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	last := c.warm(apiNode, "cl-tail")
	checkWholeDeltas(t, "SSE on the API node", streamTask(t, ctx, base, apiNode, "cl-tail", last, "count to 100"), pieces)
	if resp := respondedAfter(t, apiNode, "cl-tail", last); len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") {
		t.Fatalf("recorded answers: %+v", resp)
	}
}

// Deltas the bus truly loses are not a silent gap in a watcher's stream: when a
// batch in the middle of an answer is lost (the call's end counts more deltas than
// the watcher got), or the call's last batch is (its end never comes, and the
// answer goes on after a short wait), the watcher gets an empty delta with Reset
// just before the answer: the text shown is dropped for the answer, whole.
func TestClusterWatcherToldOfLostDeltas(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	c.pace = 2 * time.Millisecond
	apiNode, base := startDeltaCluster(t, c, droppingFeed(func(b messages.DeltaBatch) bool {
		switch b.SessionID {
		case "cl-gap": // the batch with the 50th delta
			for _, d := range b.Deltas {
				if d.Seq == 50 {
					return true
				}
			}
		case "cl-noend":
			return b.End != nil
		}
		return false
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, session := range []string{"cl-gap", "cl-noend"} {
		last := c.warm(apiNode, session)
		got := streamTask(t, ctx, base, apiNode, session, last, "count to 100")
		if want := "task.submitted model.requested delta model.responded task.completed"; streamOrder(got) != want {
			t.Fatalf("%s: stream order %q, want %q", session, streamOrder(got), want)
		}
		deltas := deltasOf(t, got)
		reset := deltas[len(deltas)-1]
		if !reset.Reset || reset.Content != "" || reset.Arguments != "" {
			t.Fatalf("%s: the last of %d deltas before the answer is %+v, want an empty reset", session, len(deltas), reset)
		}
		for i, d := range deltas[:len(deltas)-1] {
			if d.Reset || d.Content != pieces[d.Seq-1] || i > 0 && d.Seq <= deltas[i-1].Seq {
				t.Fatalf("%s: delta %d: %+v", session, i, d)
			}
		}
		if session == "cl-gap" && len(deltas)-1 >= len(pieces) {
			t.Fatalf("%s: %d deltas shown: no batch was lost", session, len(deltas)-1)
		}
		if resp := respondedAfter(t, apiNode, session, last); len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") {
			t.Fatalf("%s: recorded answers: %+v", session, resp)
		}
	}
}

// After a rebalance the sessions' new owner learns of the watchers other nodes have
// at once: a node with the sessions role joins, takes some partitions over and says
// so (deltas.owners), and the API node announces its watchers of the sessions there
// again; their next calls stream to the watchers. The API node's renewals are lost
// meanwhile (as if its next one were seconds away): without the notice, the new
// owner would stream nothing.
func TestClusterNewOwnerStreamsForExistingWatchersAtOnce(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	first, _, _ := c.node("owner-1", node.RoleSessions|node.RoleTools, 0)
	c.node("models", node.RoleModels, 0)
	apiNode, apiPub, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the first owner owning every partition", func() bool { return first.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A watched session on each partition.
	var sessions []string
	for i, covered := 0, map[int]bool{}; len(covered) < 6; i++ {
		id := "cl-moves-" + strconv.Itoa(i)
		if p := kafka.PartitionOf(id, 6); !covered[p] {
			covered[p] = true
			sessions = append(sessions, id)
		}
	}
	last := map[string]uint64{}
	for _, s := range sessions {
		last[s] = c.warm(apiNode, s)
	}
	streams := map[string]<-chan sseEvent{}
	for _, s := range sessions {
		streams[s] = openStream(t, ctx, api.URL, s, last[s])
	}
	announced := apiPub.watches.Load()
	if announced != int64(len(sessions)) {
		t.Fatalf("the API node announced %d watchers, want %d", announced, len(sessions))
	}

	c.watchGate.Store(true) // the API node's announcements are lost until a deltas.owners
	second, _, _ := c.node("owner-2", node.RoleSessions|node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the partitions shared by both owners", func() bool {
		a, b := first.PartitionsOwned(), second.PartitionsOwned()
		return a > 0 && b > 0 && a+b == 6
	})
	// The watchers of the moved sessions are announced again (within 10 s, or the
	// tasks go without: then their calls do not stream).
	moved := int64(second.PartitionsOwned())
	for deadline := time.Now().Add(10 * time.Second); apiPub.watches.Load() < announced+moved && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range sessions {
		if _, err := apiNode.Submit(ctx, node.Task{Input: "count to 100", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sessions {
		checkWholeDeltas(t, "SSE on the API node, "+s, untilDone(t, ctx, streams[s]), pieces)
	}
}
