package node

import (
	"context"
	"encoding/json"
	"log/slog"
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

// A node that stops before it read its replies answers the waiting command at once.
func TestRoutedMemoryCommandStoppingBeforeRepliesAreRead(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler)}, routing: make(chan struct{}), stopping: make(chan struct{})}
	pub := &replyingPublisher{t: t, n: n, early: make(chan struct{})}
	n.pub = pub
	c := messages.MemoryCommand{ID: "c1", SessionID: "memory/ns", Namespace: "ns", Action: memoryAdd, Key: "k",
		Args: json.RawMessage(`{}`), ReplyTopic: messages.TopicReplies, ReplyNode: "n1"}
	done := make(chan error, 1)
	go func() {
		_, err := n.memoryRemoteWithin(context.Background(), c, time.Hour)
		done <- err
	}()
	close(n.stopping)
	if err := <-done; err == nil {
		t.Fatal("a stopping node's command answered without error")
	}
	select {
	case <-pub.early:
		t.Fatal("the command was published before the node read its replies")
	default:
	}
}
