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
	Ready  <-chan struct{}
	Logger *slog.Logger
}

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
type BusEffects struct {
	cfg  BusEffectsConfig
	stop chan struct{}

	mu     sync.Mutex
	closed bool
	// pending holds the callers waiting on each key (a session's restarted
	// incarnation may issue a key its previous one is waiting on).
	pending map[messages.EffectKey][]func(messages.EffectReply)
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
	return &BusEffects{cfg: cfg, stop: make(chan struct{}), pending: map[messages.EffectKey][]func(messages.EffectReply){}}
}

// Perform implements Effects. The request is published in the background (the
// broker's acknowledgement takes a while; the session goes on meanwhile).
func (b *BusEffects) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.pending[req.Key] = append(b.pending[req.Key], reply)
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
		}
	}()
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
	return len(b.pending[key]) > 0
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
	waiters := b.pending[rep.Key]
	delete(b.pending, rep.Key)
	b.mu.Unlock()
	for _, reply := range waiters {
		reply(rep)
	}
}

// Cancel implements Effects: the caller is answered at once, and the nodes that may
// perform the effect are told on messages.TopicEffectCancels.
func (b *BusEffects) Cancel(key messages.EffectKey) {
	b.mu.Lock()
	waiters, ok := b.pending[key]
	delete(b.pending, key)
	b.mu.Unlock()
	if !ok {
		return
	}
	for _, reply := range waiters {
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

// Close drops every pending effect, unanswered, and stops publishing retries. The
// effects go on on the nodes performing them (their answers are kept there for the
// sessions' next owners, who issue them again). It is idempotent.
func (b *BusEffects) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.pending = map[messages.EffectKey][]func(messages.EffectReply){}
		close(b.stop)
	}
	return nil
}
