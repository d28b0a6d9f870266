package actors_test

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// recordingPublisher keeps what it is given, or refuses everything.
type recordingPublisher struct {
	refuse bool
	mu     sync.Mutex
	got    map[string][]*message.Message
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.refuse {
		return errors.New("broker unreachable")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[topic] = append(p.got[topic], msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) count(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got[topic])
}

func (p *recordingPublisher) payload(topic string, i int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[topic][i].Payload
}

// BusEffects publishes each request as it is and answers with the reply handed to
// Deliver; a reply nobody waits for is dropped; a request that cannot be published is
// answered with an error instead of leaving the session waiting; Cancel answers at
// once, and Close drops what is pending.
func TestBusEffects(t *testing.T) {
	pub := &recordingPublisher{got: map[string][]*message.Message{}}
	b := actors.NewBusEffects(actors.BusEffectsConfig{Publisher: pub, NodeID: "n1"})
	r := newReplies()
	tool, model := toolRequest("s-1", 4, "ledger"), modelRequest("s-1", 2)
	b.Perform(tool, r.to)
	b.Perform(model, r.to)
	b.Perform(tool, r.to) // issued again (a restarted session): both callers are answered
	waitUntil(t, "the requests published", func() bool {
		return pub.count(messages.TopicToolRequests) == 2 && pub.count(messages.TopicModelRequests) == 1
	})
	req, err := messages.DecodeEffectRequest(pub.payload(messages.TopicToolRequests, 0))
	if err != nil || req.Key != tool.Key || req.SessionID != "s-1" || req.ReplyNode != "n1" || req.ReplyTopic != messages.TopicReplies || req.Tool == nil {
		t.Fatalf("tool request %+v, %v", req, err)
	}
	mreq, err := messages.DecodeEffectRequest(pub.payload(messages.TopicModelRequests, 0))
	if err != nil || mreq.Model == nil || mreq.Model.Messages[0].Content != "hi" {
		t.Fatalf("model request %+v, %v", mreq, err)
	}

	msg := messages.ChatMessage{Role: messages.RoleAssistant, Content: "hello"}
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 9}, Output: "nobody asked"})
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: tool.Key, Output: "paid", LatencyUS: 7})
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: model.Key, Model: "m", Message: &msg})
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: tool.Key, Output: "a duplicate"})
	if got := r.of(tool.Key); len(got) != 2 || got[0].Output != "paid" || got[1].Output != "paid" {
		t.Errorf("tool answered %+v", got)
	}
	if got := r.of(model.Key); len(got) != 1 || got[0].Message.Content != "hello" || got[0].Model != "m" {
		t.Errorf("model answered %+v", got)
	}
	if n := r.count(); n != 3 {
		t.Errorf("%d answers, want 3", n)
	}

	cancelled := toolRequest("s-1", 6, "ledger")
	b.Perform(cancelled, r.to)
	b.Cancel(cancelled.Key)
	if got := r.of(cancelled.Key); len(got) != 1 || got[0].Error != actors.ErrEffectCancelled.Error() {
		t.Errorf("cancelled request answered %+v", got)
	}
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: cancelled.Key, Output: "late"})
	if got := r.of(cancelled.Key); len(got) != 1 {
		t.Errorf("a reply after the cancellation reached the caller: %+v", got)
	}
	waitUntil(t, "the cancellation published", func() bool { return pub.count(messages.TopicEffectCancels) == 1 })
	if c, err := messages.DecodeEffectCancel(pub.payload(messages.TopicEffectCancels, 0)); err != nil || c.Key != cancelled.Key {
		t.Errorf("effect cancel %+v, %v", c, err)
	}
	b.Cancel(messages.EffectKey{SessionID: "s-1", Seq: 77}) // nothing pending: nothing published

	if n := pub.count(messages.TopicEffectCancels); n != 1 {
		t.Errorf("%d cancellations published, want 1", n)
	}

	closing := toolRequest("s-1", 8, "ledger")
	b.Perform(closing, r.to)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: closing.Key, Output: "after close"})
	if got := r.of(closing.Key); len(got) != 0 {
		t.Errorf("answered after Close: %+v", got)
	}

	down := actors.NewBusEffects(actors.BusEffectsConfig{Publisher: &recordingPublisher{refuse: true}, NodeID: "n1", PublishRetries: 2})
	t.Cleanup(func() { _ = down.Close() })
	failed := toolRequest("s-2", 4, "ledger")
	down.Perform(failed, r.to)
	waitUntil(t, "the unpublishable request answered", func() bool { return len(r.of(failed.Key)) == 1 })
	if got := r.of(failed.Key)[0]; !strings.Contains(got.Error, "not published") {
		t.Errorf("unpublishable request answered %+v", got)
	}
}

// A request waits for Ready before it is published: a reply sent before the node
// reads its replies (from the latest offset) would never reach it, and the call
// would wait for ever. Once Ready is closed, it is published.
func TestBusEffectsPublishOnceRepliesAreRead(t *testing.T) {
	pub := &recordingPublisher{got: map[string][]*message.Message{}}
	ready := make(chan struct{})
	b := actors.NewBusEffects(actors.BusEffectsConfig{Publisher: pub, NodeID: "n1", Ready: ready})
	t.Cleanup(func() { _ = b.Close() })
	r := newReplies()
	model := modelRequest("s-1", 2)
	b.Perform(model, r.to)
	// Nothing may be published before Ready, however long it takes: give the
	// request's goroutine time to (wrongly) publish.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := pub.count(messages.TopicModelRequests); n != 0 {
			t.Fatalf("%d requests published before the replies are read", n)
		}
		runtime.Gosched()
	}
	close(ready)
	waitUntil(t, "the request published", func() bool { return pub.count(messages.TopicModelRequests) == 1 })
	b.Deliver(messages.EffectReply{SessionID: "s-1", Key: model.Key, Output: "hello"})
	if got := r.of(model.Key); len(got) != 1 {
		t.Fatalf("answered %+v", got)
	}
}
