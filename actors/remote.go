package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// BusEffectsConfig configures BusEffects.
type BusEffectsConfig struct {
	// Publisher sends the requests (messages.TopicToolRequests, TopicModelRequests).
	Publisher message.Publisher
	// NodeID names this node: replies come back on messages.TopicReplies with
	// messages.MetaReplyNode set to it.
	NodeID string
	// PublishRetries bounds the attempts to publish one request (default 5); a request
	// that cannot be published is answered with an error.
	PublishRetries int
	// Inject, when set, adds to the metadata of a request's message what travels
	// with it besides the request: the trace context of the effect's span (the
	// node's traces).
	Inject func(req messages.EffectRequest, md message.Metadata)
	// MaxMessage bounds the encoded request published as it is; a larger one is
	// handed to Store, and its reference (messages.EffectRequest.Stored) is published
	// instead. Zero, or no Store: every request is published as it is.
	MaxMessage int
	// Store stores the encoded request of key in the log and returns the stream
	// it is in (messages.EffectStream).
	Store func(ctx context.Context, key messages.EffectKey, command []byte) (string, error)
	// Ready, when set, is closed once the node reads messages.TopicReplies (its
	// subscription there, from the latest offset, is positioned): a request waits
	// for it before it is published, since a reply published before then would
	// never be read and the call would wait for ever. Nil: replies are read now.
	Ready <-chan struct{}
	// Reissue is how long a published request waits for its reply before it is
	// published again (default DefaultReissue; negative: never). Each further wait
	// doubles, up to ReissueMax (default 8 × Reissue). Set it above the performer's
	// call timeout: a request published again while its call runs joins that call,
	// a message for nothing.
	Reissue, ReissueMax time.Duration
	// Tools, when set, are the tools this node knows (its registry; the performing
	// nodes have the same when they share its configuration): the first re-issue of a
	// call of one that sets a timeout of its own (tools.Limits, e.g. http_fetch's,
	// up to 10 minutes) waits at least that timeout plus ReissueMargin (default
	// DefaultReissueMargin), however Reissue was set, since the performer runs the
	// call that long. A tool this node does not know (one only the performers have,
	// e.g. from their ToolCatalog), or whose timeout the performers set otherwise
	// than this node does, waits Reissue.
	Tools         *tools.Registry
	ReissueMargin time.Duration
	// OnReissue, when set, is called each time a request is published again.
	OnReissue func()
	// RunsHere, when set, reports whether a session runs on this node: a request
	// due to be published again whose session does not (it moved to another node,
	// which issues its effects again) is dropped instead, unanswered.
	RunsHere func(sessionID string) bool
	Logger   *slog.Logger
}

// DefaultReissue is BusEffectsConfig.Reissue's default: a model call's default
// timeout (LocalEffectsConfig.ModelTimeout) and DefaultReissueMargin.
const DefaultReissue = 150 * time.Second

// DefaultReissueMargin is BusEffectsConfig.ReissueMargin's default.
const DefaultReissueMargin = 30 * time.Second

// BusEffects has effects performed by the nodes that have the role (tools, models):
// it publishes each request as it is, a messages.EffectRequest, and answers with the
// messages.EffectReply the node hands to Deliver (read from messages.TopicReplies).
// Cancel answers at once and publishes a messages.EffectCancel, which the performing
// node turns into the cancellation of the call's context.
//
// A request is published with a fresh message ID each time it is issued, so a
// session's next owner that issues it again (same key) is not mistaken for a duplicate
// delivery; the performing nodes perform it once per key. A reply nobody waits for
// (its session moved to another node, or an earlier copy was answered) is dropped: the
// session's owner issues the effect again if it is still unanswered.
//
// A reply can be lost (the node's subscription to messages.TopicReplies was
// positioned at the latest offset again after a broker restart or a rebalance, or
// the performer could not publish it): a request still unanswered Reissue after it
// was published (a call of a tool with a longer timeout of its own: that timeout
// and ReissueMargin, BusEffectsConfig.Tools) is published again, with a fresh message ID (a large one with the
// same reference, not stored again), then after waits that double up to
// ReissueMax, until it is answered, cancelled (Cancel) or the effects close, or its
// session runs here no more (RunsHere). The performer answers it from the answer it
// keeps, or joins the call still running, so the effect is performed once and the
// caller answered once.
type BusEffects struct {
	cfg  BusEffectsConfig
	stop chan struct{}
	// reissuing counts the armed re-issue timers and the re-issues running: Close
	// waits for them.
	reissuing sync.WaitGroup

	mu     sync.Mutex
	closed bool
	// pending holds the callers waiting on each key (a session's restarted
	// incarnation may issue a key its previous one is waiting on).
	pending map[messages.EffectKey]*pendingEffect
}

// pendingEffect is a key's unanswered request: its callers and its re-issue.
type pendingEffect struct {
	waiters []func(messages.EffectReply)
	// topic and msg are the request as first published (msg's payload is its
	// reference when it was stored), set once it was; nil before.
	topic string
	msg   *message.Message
	// timer is the next re-issue, when armed; wait the time it waits; attempt
	// counts the re-issues so far.
	timer   *time.Timer
	wait    time.Duration
	attempt int
}

var _ Effects = (*BusEffects)(nil)

// NewBusEffects returns the effects of a node that asks other nodes to perform them.
func NewBusEffects(cfg BusEffectsConfig) *BusEffects {
	if cfg.PublishRetries <= 0 {
		cfg.PublishRetries = 5
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Reissue == 0 {
		cfg.Reissue = DefaultReissue
	}
	if cfg.ReissueMax < cfg.Reissue {
		cfg.ReissueMax = 8 * cfg.Reissue
	}
	if cfg.ReissueMargin <= 0 {
		cfg.ReissueMargin = DefaultReissueMargin
	}
	return &BusEffects{cfg: cfg, stop: make(chan struct{}), pending: map[messages.EffectKey]*pendingEffect{}}
}

// Perform implements Effects. The request is published in the background (the
// broker's acknowledgement takes a while; the session goes on meanwhile).
func (b *BusEffects) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	p := b.pending[req.Key]
	if p == nil {
		p = &pendingEffect{}
		b.pending[req.Key] = p
	}
	p.waiters = append(p.waiters, reply)
	b.mu.Unlock()
	topic := messages.TopicToolRequests
	if req.Model != nil {
		topic = messages.TopicModelRequests
	}
	req.ReplyTopic, req.ReplyNode = messages.TopicReplies, b.cfg.NodeID
	payload, err := messages.EncodeCommand(&req)
	if err != nil {
		b.Deliver(answer(req, messages.EffectReply{Error: fmt.Sprintf("encode effect request: %v", err)}))
		return
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set(messages.MetaSessionID, req.SessionID)
	if b.cfg.Inject != nil {
		b.cfg.Inject(req, msg.Metadata)
	}
	large := b.cfg.Store != nil && b.cfg.MaxMessage > 0 && len(payload) > b.cfg.MaxMessage
	go func() {
		if b.cfg.Ready != nil {
			select {
			case <-b.cfg.Ready:
			case <-b.stop:
				b.Deliver(answer(req, messages.EffectReply{Error: fmt.Sprintf("request %s not published: %v", req.Key, ErrEffectsClosed)}))
				return
			}
		}
		if large {
			ref, err := b.reference(req, payload)
			if err != nil {
				b.Deliver(answer(req, messages.EffectReply{Error: err.Error()}))
				return
			}
			msg.Payload = ref
		}
		if err := b.publish(topic, msg); err != nil {
			b.Deliver(answer(req, messages.EffectReply{Error: err.Error()}))
			return
		}
		b.armReissue(req.Key, p, topic, msg, b.firstReissue(req))
	}()
}

// firstReissue is how long req waits for its reply before it is published again
// the first time: Reissue, or longer for a call of a tool whose own timeout this
// node knows (BusEffectsConfig.Tools) and Reissue would not outlast.
func (b *BusEffects) firstReissue(req messages.EffectRequest) time.Duration {
	wait := b.cfg.Reissue
	if req.Tool == nil || b.cfg.Tools == nil {
		return wait
	}
	if t, ok := b.cfg.Tools.Get(req.Tool.Tool); ok {
		if own := tools.LimitsOf(t).Timeout; own > 0 {
			wait = max(wait, own+b.cfg.ReissueMargin)
		}
	}
	return wait
}

// armReissue arms the first re-issue of p, the pending request of key just
// published as msg on topic, to go out after wait, unless it was answered, the
// effects closed, or an earlier issue of the key armed it already.
func (b *BusEffects) armReissue(key messages.EffectKey, p *pendingEffect, topic string, msg *message.Message, wait time.Duration) {
	if b.cfg.Reissue < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.pending[key] != p || p.msg != nil {
		return
	}
	p.topic, p.msg, p.wait = topic, msg, wait
	b.scheduleReissue(key, p)
}

// scheduleReissue arms p's next re-issue, p.wait from now. The caller holds b.mu.
func (b *BusEffects) scheduleReissue(key messages.EffectKey, p *pendingEffect) {
	b.reissuing.Add(1)
	p.timer = time.AfterFunc(p.wait, func() { b.reissue(key, p) })
}

// disarm stops p's re-issue timer, if armed and not fired. The caller holds b.mu.
func (b *BusEffects) disarm(p *pendingEffect) {
	if p.timer != nil && p.timer.Stop() {
		b.reissuing.Done() // the timer's function will not run
	}
}

// reissue publishes p, the request of key, again with a fresh message ID if it is
// still unanswered, and arms the next re-issue, twice as far (up to ReissueMax).
// A re-issue the bus refuses is tried again at the next one: the first publication
// reached the bus, and the reply may still come.
func (b *BusEffects) reissue(key messages.EffectKey, p *pendingEffect) {
	defer b.reissuing.Done()
	b.mu.Lock()
	if b.closed || b.pending[key] != p {
		b.mu.Unlock()
		return
	}
	if b.cfg.RunsHere != nil && !b.cfg.RunsHere(key.SessionID) {
		delete(b.pending, key)
		b.mu.Unlock()
		b.cfg.Logger.Info("dropping an unanswered effect request of a session that runs elsewhere now", "key", key)
		return
	}
	p.attempt++
	attempt, topic, msg := p.attempt, p.topic, p.msg.Copy()
	b.mu.Unlock()
	msg.UUID = watermill.NewUUID()
	b.cfg.Logger.Warn("effect request unanswered; publishing it again", "key", key, "topic", topic, "attempt", attempt)
	if b.cfg.OnReissue != nil {
		b.cfg.OnReissue()
	}
	if err := b.publish(topic, msg); err != nil {
		b.cfg.Logger.Warn("effect request not published again; trying at the next re-issue", "key", key, "attempt", attempt, "err", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.pending[key] != p {
		return
	}
	p.wait = min(2*p.wait, b.cfg.ReissueMax)
	b.scheduleReissue(key, p)
}

// reference stores the encoded request in the log (BusEffectsConfig.Store), retrying
// as publish does, and returns the reference that names it.
func (b *BusEffects) reference(req messages.EffectRequest, payload []byte) ([]byte, error) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stream, err := b.cfg.Store(ctx, req.Key, payload)
		cancel()
		if err == nil {
			return messages.EncodeCommand(&messages.EffectRequest{SessionID: req.SessionID, Key: req.Key,
				ReplyTopic: req.ReplyTopic, ReplyNode: req.ReplyNode, Stored: stream})
		}
		if attempt == b.cfg.PublishRetries {
			return nil, fmt.Errorf("request %s (%d bytes, over the bus's %d) not stored in the log: %w", req.Key, len(payload), b.cfg.MaxMessage, err)
		}
		b.cfg.Logger.Warn("storing a large effect request failed; retrying", "key", req.Key, "attempt", attempt, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-b.stop:
			t.Stop()
			return nil, fmt.Errorf("request %s not stored: %w", req.Key, ErrEffectsClosed)
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// Waiting reports whether a caller here waits for key's reply.
func (b *BusEffects) Waiting(key messages.EffectKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending[key] != nil
}

// publish publishes a command message, retrying with backoff until PublishRetries
// attempts failed or the effects close.
func (b *BusEffects) publish(topic string, msg *message.Message) error {
	sessionID := msg.Metadata.Get(messages.MetaSessionID)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := b.cfg.Publisher.Publish(topic, msg.Copy())
		if err == nil {
			return nil
		}
		if attempt == b.cfg.PublishRetries {
			b.cfg.Logger.Error("effect command not published", "topic", topic, "session", sessionID, "attempts", attempt, "err", err)
			return fmt.Errorf("request to %s not published: %w", topic, err)
		}
		b.cfg.Logger.Warn("publish effect command failed; retrying", "topic", topic, "session", sessionID, "attempt", attempt, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-b.stop:
			t.Stop()
			return fmt.Errorf("request to %s not published: %w", topic, ErrEffectsClosed)
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// Deliver answers the effect a reply read from messages.TopicReplies is for; a reply
// nobody waits for is dropped.
func (b *BusEffects) Deliver(rep messages.EffectReply) {
	b.mu.Lock()
	p := b.pending[rep.Key]
	delete(b.pending, rep.Key)
	if p != nil {
		b.disarm(p)
	}
	b.mu.Unlock()
	if p == nil {
		return
	}
	for _, reply := range p.waiters {
		reply(rep)
	}
}

// Cancel implements Effects: the caller is answered at once, the request is not
// published again, and the nodes that may perform the effect are told on
// messages.TopicEffectCancels.
func (b *BusEffects) Cancel(key messages.EffectKey) {
	b.mu.Lock()
	p := b.pending[key]
	delete(b.pending, key)
	if p != nil {
		b.disarm(p)
	}
	b.mu.Unlock()
	if p == nil {
		return
	}
	for _, reply := range p.waiters {
		reply(messages.EffectReply{SessionID: key.SessionID, Key: key, Error: ErrEffectCancelled.Error()})
	}
	payload, err := messages.EncodeCommand(&messages.EffectCancel{SessionID: key.SessionID, Key: key})
	if err != nil {
		b.cfg.Logger.Error("encode effect cancellation", "key", key, "err", err)
		return
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set(messages.MetaSessionID, key.SessionID)
	go func() {
		if err := b.publish(messages.TopicEffectCancels, msg); err != nil {
			b.cfg.Logger.Warn("effect cancellation not published; the call runs to its end or timeout", "key", key, "err", err)
		}
	}()
}

// Close drops every pending effect, unanswered, and stops publishing retries and
// re-issues (it returns once no re-issue runs, within a publication's time). The
// effects go on on the nodes performing them (their answers are kept there for the
// sessions' next owners, who issue them again). It is idempotent.
func (b *BusEffects) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		for _, p := range b.pending {
			b.disarm(p)
		}
		b.pending = map[messages.EffectKey]*pendingEffect{}
		close(b.stop)
	}
	b.mu.Unlock()
	b.reissuing.Wait()
	return nil
}
