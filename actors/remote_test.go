package actors_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
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

// RemoteEffects publishes a session's calls as requests and answers the session with
// the reply; a reply nobody waits for is dropped; a request that cannot be published
// answers the session with an error instead of leaving it waiting.
func TestRemoteEffects(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	pub := &recordingPublisher{got: map[string][]*message.Message{}}
	remote := sys.Root.Spawn(actors.NewRemoteEffectsProps(actors.RemoteEffectsConfig{Publisher: pub, NodeID: "n1"}))

	toolReply := actor.NewFuture(sys, 5*time.Second)
	sys.Root.Send(remote, &actors.ToolCall{Request: messages.ToolCallRequested{Key: "s-1/4", CallID: "c", Tool: "ledger", Arguments: "{}"}, ReplyTo: toolReply.PID()})
	modelReply := actor.NewFuture(sys, 5*time.Second)
	sys.Root.Send(remote, &actors.ModelCall{Request: llm.Request{Key: "s-1/2", Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}, ReplyTo: modelReply.PID(), SessionID: "s-1"})
	waitUntil(t, "both requests published", func() bool {
		return pub.count(messages.TopicToolRequests) == 1 && pub.count(messages.TopicModelRequests) == 1
	})
	req, err := messages.DecodeEffectRequest(pub.got[messages.TopicToolRequests][0].Payload)
	if err != nil || req.SessionID != "s-1" || req.ReplyNode != "n1" || req.ReplyTopic != messages.TopicReplies || req.Tool == nil {
		t.Fatalf("tool request %+v, %v", req, err)
	}
	mreq, err := messages.DecodeEffectRequest(pub.got[messages.TopicModelRequests][0].Payload)
	if err != nil || mreq.Model == nil || mreq.Model.Messages[0].Content != "hi" {
		t.Fatalf("model request %+v, %v", mreq, err)
	}

	msg := messages.ChatMessage{Role: messages.RoleAssistant, Content: "hello"}
	sys.Root.Send(remote, &actors.RemoteReply{Reply: messages.EffectReply{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 9}, Output: "nobody asked"}})
	sys.Root.Send(remote, &actors.RemoteReply{Reply: messages.EffectReply{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 4}, Output: "paid", LatencyUS: 7}})
	sys.Root.Send(remote, &actors.RemoteReply{Reply: messages.EffectReply{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 2}, Model: "m", Message: &msg}})
	res, err := toolReply.Result()
	if tr, ok := res.(*actors.ToolResult); err != nil || !ok || tr.Output != "paid" || tr.Key != "s-1/4" || tr.Err != nil {
		t.Fatalf("tool result %#v, %v", res, err)
	}
	res, err = modelReply.Result()
	if mr, ok := res.(*actors.ModelResult); err != nil || !ok || mr.Response.Message.Content != "hello" || mr.Model != "m" {
		t.Fatalf("model result %#v, %v", res, err)
	}

	down := sys.Root.Spawn(actors.NewRemoteEffectsProps(actors.RemoteEffectsConfig{Publisher: &recordingPublisher{refuse: true}, NodeID: "n1", PublishRetries: 2}))
	failed := actor.NewFuture(sys, 10*time.Second)
	sys.Root.Send(down, &actors.ToolCall{Request: messages.ToolCallRequested{Key: "s-2/4", CallID: "c", Tool: "ledger"}, ReplyTo: failed.PID()})
	res, err = failed.Result()
	if tr, ok := res.(*actors.ToolResult); err != nil || !ok || tr.Err == nil || !strings.Contains(tr.Err.Error(), "not published") {
		t.Fatalf("unpublishable request answered %#v, %v", res, err)
	}
}
