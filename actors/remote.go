package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// RemoteEffectsConfig configures a RemoteEffects actor.
type RemoteEffectsConfig struct {
	// Publisher sends the requests (messages.TopicToolRequests, TopicModelRequests).
	Publisher message.Publisher
	// NodeID names this node: replies come back on messages.TopicReplies with
	// messages.MetaReplyNode set to it.
	NodeID string
	// PublishRetries bounds the attempts to publish one request (default 5); a request
	// that cannot be published answers the session with an error result.
	PublishRetries int
	Logger         *slog.Logger
}

// RemoteEffects stands in for the model actor or the tool actors on a node without
// the models or tools role: it takes the same *ModelCall and *ToolCall messages a
// session sends them, publishes each as a messages.EffectRequest for the nodes that
// have the role, and turns the *RemoteReply the node hands it back into the
// *ModelResult or *ToolResult the session waits for.
//
// A request is published with a fresh message ID each time it is issued, so a
// session's next owner that issues it again (same effect Key) is not mistaken for a
// duplicate delivery; tools perform their side effect once per Key. A reply nobody
// waits for (its session moved to another node, or an earlier copy was answered) is
// dropped: the session's owner issues the effect again if it is still unanswered.
type RemoteEffects struct {
	cfg     RemoteEffectsConfig
	pending map[string]remoteCall
}

type remoteCall struct {
	replyTo *actor.PID
	model   bool
	tool    string
}

// RemoteReply hands a RemoteEffects actor a reply read from messages.TopicReplies.
type RemoteReply struct {
	Reply messages.EffectReply
}

// remoteFailed reports a request that could not be published.
type remoteFailed struct {
	key string
	err error
}

// NewRemoteEffectsProps returns the props of a RemoteEffects actor.
func NewRemoteEffectsProps(cfg RemoteEffectsConfig) *actor.Props {
	if cfg.PublishRetries <= 0 {
		cfg.PublishRetries = 5
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &RemoteEffects{cfg: cfg, pending: map[string]remoteCall{}}
	}, actor.WithSupervisor(effectStrategy()))
}

// Receive implements actor.Actor.
func (r *RemoteEffects) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *ModelCall, *ToolCall:
		req, call, _ := effectOf(m)
		topic := messages.TopicToolRequests
		if call.model {
			topic = messages.TopicModelRequests
		}
		r.request(ctx, topic, call, req)
	case *RemoteReply:
		call, ok := r.pending[m.Reply.Key.String()]
		if !ok {
			return
		}
		delete(r.pending, m.Reply.Key.String())
		ctx.Send(call.replyTo, resultOf(call, m.Reply))
	case *remoteFailed:
		call, ok := r.pending[m.key]
		if !ok {
			return
		}
		delete(r.pending, m.key)
		ctx.Send(call.replyTo, resultOf(call, messages.EffectReply{Key: mustKey(m.key), Error: m.err.Error()}))
	}
}

func (r *RemoteEffects) request(ctx actor.Context, topic string, call remoteCall, req messages.EffectRequest) {
	r.pending[req.Key.String()] = call
	req.ReplyTopic, req.ReplyNode = messages.TopicReplies, r.cfg.NodeID
	b, err := messages.EncodeCommand(&req)
	if err != nil {
		ctx.Send(ctx.Self(), &remoteFailed{key: req.Key.String(), err: err})
		return
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaSessionID, req.SessionID)
	self, root, logger := ctx.Self(), ctx.ActorSystem().Root, r.cfg.Logger
	pub, retries := r.cfg.Publisher, r.cfg.PublishRetries
	// Publishing waits for the broker; the actor goes on with other calls meanwhile.
	go func() {
		backoff := 100 * time.Millisecond
		for attempt := 1; ; attempt++ {
			err := pub.Publish(topic, msg.Copy())
			if err == nil {
				return
			}
			if attempt == retries {
				logger.Error("effect request not published", "topic", topic, "key", req.Key, "attempts", attempt, "err", err)
				root.Send(self, &remoteFailed{key: req.Key.String(), err: fmt.Errorf("request to %s not published: %w", topic, err)})
				return
			}
			logger.Warn("publish effect request failed; retrying", "topic", topic, "key", req.Key, "attempt", attempt, "err", err)
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
		}
	}()
}

// effectOf turns a session's *ModelCall or *ToolCall into the request for its effect
// and the caller to answer; ok is false for any other message.
func effectOf(msg any) (req messages.EffectRequest, call remoteCall, ok bool) {
	switch m := msg.(type) {
	case *ModelCall:
		mc := ModelCallOf(m.Request)
		return messages.EffectRequest{SessionID: m.SessionID, Key: mustKey(m.Request.Key), Model: &mc}, remoteCall{replyTo: m.ReplyTo, model: true}, true
	case *ToolCall:
		tc := m.Request
		return messages.EffectRequest{SessionID: mustKey(tc.Key).SessionID, Key: mustKey(tc.Key), Tool: &tc}, remoteCall{replyTo: m.ReplyTo, tool: tc.Tool}, true
	}
	return req, call, false
}

func resultOf(call remoteCall, rep messages.EffectReply) any {
	var err error
	if rep.Error != "" {
		err = errors.New(rep.Error)
	}
	if call.model {
		res := &ModelResult{Key: rep.Key.String(), Model: rep.Model, Err: err, LatencyUS: rep.LatencyUS}
		res.Response = llm.Response{Usage: rep.Usage, Model: rep.Model, Cached: rep.Cached}
		if rep.Message != nil {
			res.Response.Message = *rep.Message
		}
		return res
	}
	return &ToolResult{Key: rep.Key.String(), Output: rep.Output, Err: err, LatencyUS: rep.LatencyUS}
}

// mustKey parses an effect key the session state made.
func mustKey(key string) messages.EffectKey {
	k, _ := messages.ParseEffectKey(key)
	return k
}

// ModelCallOf converts a model request to its wire form.
func ModelCallOf(r llm.Request) messages.ModelCall {
	return messages.ModelCall{Step: r.Step, Messages: r.Messages, Tools: r.Tools, Agent: r.Scope.Agent, Team: r.Scope.Team, ScopeKey: r.Scope.Key, NoCache: r.NoCache}
}

// RequestOf converts a model request's wire form back, with its idempotency key.
func RequestOf(key string, c messages.ModelCall) llm.Request {
	return llm.Request{Key: key, Step: c.Step, Messages: c.Messages, Tools: c.Tools, Scope: llm.Scope{Agent: c.Agent, Team: c.Team, Key: c.ScopeKey}, NoCache: c.NoCache}
}

// ErrNoSuchTool answers an effect request for a tool this node does not have.
var ErrNoSuchTool = errors.New("actors: no such tool on this node")

// PerformEffect performs an effect request on this node's model actor or tool actors
// (the serving side of RemoteEffects) and returns the reply to publish. A tool or model
// that fails answers a reply with Error set; PerformEffect itself fails only when no
// answer came within wait (the caller should let the request be delivered again) or
// when the request names a tool this node lacks (ErrNoSuchTool; it never will have it).
func PerformEffect(ctx context.Context, sys *actor.ActorSystem, model *actor.PID, toolPIDs map[string]*actor.PID, req messages.EffectRequest, wait time.Duration) (messages.EffectReply, error) {
	f := actor.NewFuture(sys, wait)
	rep := messages.EffectReply{SessionID: req.SessionID, Key: req.Key}
	switch {
	case req.Model != nil:
		if model == nil {
			return rep, errors.New("actors: this node has no model actor")
		}
		sys.Root.Send(model, &ModelCall{Request: RequestOf(req.Key.String(), *req.Model), ReplyTo: f.PID(), SessionID: req.SessionID})
	case req.Tool != nil:
		pid, ok := toolPIDs[req.Tool.Tool]
		if !ok {
			return rep, fmt.Errorf("%w: %q", ErrNoSuchTool, req.Tool.Tool)
		}
		sys.Root.Send(pid, &ToolCall{Request: *req.Tool, ReplyTo: f.PID()})
	}
	done := make(chan struct{})
	var res any
	var err error
	go func() { res, err = f.Result(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	if err != nil {
		return rep, fmt.Errorf("actors: effect %s: no answer within %s: %w", req.Key, wait, err)
	}
	switch r := res.(type) {
	case *ModelResult:
		model := r.Model
		if r.Response.Model != "" {
			model = r.Response.Model
		}
		msg := r.Response.Message
		rep.Model, rep.Message, rep.Usage, rep.Cached, rep.LatencyUS = model, &msg, r.Response.Usage, r.Response.Cached, r.LatencyUS
		if r.Err != nil {
			rep.Error = r.Err.Error()
		}
	case *ToolResult:
		rep.Output, rep.LatencyUS = r.Output, r.LatencyUS
		if r.Err != nil {
			rep.Error = r.Err.Error()
		}
	default:
		return rep, fmt.Errorf("actors: effect %s: unexpected answer %T", req.Key, res)
	}
	return rep, nil
}
