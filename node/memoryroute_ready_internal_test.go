package node

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// replyingPublisher answers each memory command it publishes at once, as a
// namespace's owner that is quick does, unless the node does not read its
// replies yet: that reply is lost, as one published on Kafka before the node's
// subscription to troupe.replies (from the latest offset) is positioned.
type replyingPublisher struct {
	t     *testing.T
	n     *Node
	early chan struct{}
}

func (p *replyingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		c, err := messages.DecodeMemoryCommand(msg.Payload)
		if err != nil {
			p.t.Errorf("published %s: %v", topic, err)
			continue
		}
		select {
		case <-p.n.routing:
		default:
			close(p.early) // its reply is never read
			continue
		}
		b, _ := json.Marshal(messages.MemoryReply{ID: c.ID, Result: json.RawMessage(`{"ok":true}`)})
		go p.n.deliverMemoryReply(message.NewMessage("r-"+c.ID, b))
	}
	return nil
}

func (p *replyingPublisher) Close() error { return nil }

// A memory, notes or knowledge command sent to its owner while the node starts
// (a task's tool call, handled before the router runs every handler) waits until
// the node reads troupe.replies: sent before, its answer would be lost and the
// call would fail after memoryTimeout, the write made or not.
func TestRoutedMemoryCommandWaitsUntilRepliesAreRead(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler)}, routing: make(chan struct{}), stopping: make(chan struct{})}
	pub := &replyingPublisher{t: t, n: n, early: make(chan struct{})}
	n.pub = pub
	c := messages.MemoryCommand{ID: "c1", SessionID: "memory/ns", Namespace: "ns", Action: memoryAdd, Key: "k",
		Args: json.RawMessage(`{}`), ReplyTopic: messages.TopicReplies, ReplyNode: "n1"}
	type answer struct {
		res json.RawMessage
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := n.memoryRemoteWithin(context.Background(), c, time.Minute)
		done <- answer{res, err}
	}()
	waiting := time.NewTimer(100 * time.Millisecond) // a bound on the wait for a wrong publish, not a measure
	defer waiting.Stop()
	select {
	case <-pub.early:
		t.Fatal("the command was published before the node read its replies: its answer is lost")
	case a := <-done:
		t.Fatalf("the call ended before the node read its replies: %s, %v", a.res, a.err)
	case <-waiting.C:
	}
	n.routingOnce.Do(func() { close(n.routing) })
	a := <-done
	if a.err != nil || string(a.res) != `{"ok":true}` {
		t.Fatalf("answer %s, %v; want the owner's", a.res, a.err)
	}
}

// A node that stops does not answer a routed command (a notes or memory tool call)
// with "the node stops": recorded as the tool's result, the change would be
// taken as failed (made or not), and the session would go on from it; the
// bus's chaos run found tasks completed with their note never made. The call
// waits for its context, which the node's Close ends, effects answering nobody
// then, and the session's next owner performs it again under its key. Before
// the node read its replies, nothing is published meanwhile; after, the owner's
// reply, should it still come, answers it.
func TestRoutedMemoryCommandOfAStoppingNodeIsNoAnswer(t *testing.T) {
	for _, routing := range []bool{false, true} {
		n := &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler)}, routing: make(chan struct{}), stopping: make(chan struct{})}
		pub := &silentPublisher{}
		n.pub = pub
		if routing {
			n.routingOnce.Do(func() { close(n.routing) })
		}
		c := messages.MemoryCommand{ID: "c1", SessionID: "notes/default", Namespace: "default", Action: notesToolCall, Key: "s/4",
			Args: json.RawMessage(`{}`), ReplyTopic: messages.TopicReplies, ReplyNode: "n1"}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := n.memoryRemoteWithin(ctx, c, time.Hour)
			done <- err
		}()
		close(n.stopping)
		waiting := time.NewTimer(100 * time.Millisecond) // a bound on a wrong answer, not a measure
		select {
		case err := <-done:
			t.Fatalf("routing %t: a stopping node answered the call: %v", routing, err)
		case <-waiting.C:
		}
		cancel() // as the node's Close cancels the call
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("routing %t: the call ended with %v, want its context's end", routing, err)
		}
		if got := pub.count(); routing != (got == 1) {
			t.Fatalf("routing %t: %d commands published", routing, got)
		}
	}
}

// silentPublisher takes what is published and answers nothing.
type silentPublisher struct {
	mu sync.Mutex
	n  int
}

func (p *silentPublisher) Publish(string, ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return nil
}

func (p *silentPublisher) Close() error { return nil }

func (p *silentPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}
