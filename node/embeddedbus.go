package node

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/troupe-run/troupe/actors"
)

// EmbeddedBus is the in-process bus of an embedded node: Watermill's GoChannel
// configured to keep per-session order (see NewEmbeddedBus), which publishes nothing to
// a topic nobody subscribes to. An embedded node publishes every event and result
// for whoever may listen in the process (a sink, a test, an embedding program); when
// nobody does, GoChannel would copy each message, and log it, only to drop it.
//
// A message published while its first subscriber is still subscribing may be
// dropped, as GoChannel drops it.
type EmbeddedBus struct {
	ch *gochannel.GoChannel

	mu     sync.RWMutex
	topics map[string]*atomic.Int64 // subscriptions alive, by topic
}

var (
	_ message.Publisher  = (*EmbeddedBus)(nil)
	_ message.Subscriber = (*EmbeddedBus)(nil)
)

// NewEmbeddedBus returns the in-process bus of an embedded node. By default GoChannel
// hands each message to its own goroutine, so two messages of one session can
// overtake each other; BlockPublishUntilSubscriberAck makes Publish wait until every
// subscriber acked, so a publisher's messages arrive in the order it published them,
// and a nacked message is redelivered before the next one.
func NewEmbeddedBus(logger watermill.LoggerAdapter) *EmbeddedBus {
	return &EmbeddedBus{
		ch:     gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024, BlockPublishUntilSubscriberAck: true}, quietNoSubscribers{logger}),
		topics: map[string]*atomic.Int64{},
	}
}

func (b *EmbeddedBus) counter(topic string) *atomic.Int64 {
	b.mu.RLock()
	c := b.topics[topic]
	b.mu.RUnlock()
	if c != nil {
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c = b.topics[topic]; c == nil {
		c = new(atomic.Int64)
		b.topics[topic] = c
	}
	return c
}

var _ actors.TopicReaders = (*EmbeddedBus)(nil)

// HasReaders implements actors.TopicReaders: whether topic has a subscription now.
func (b *EmbeddedBus) HasReaders(topic string) bool {
	b.mu.RLock()
	c := b.topics[topic]
	b.mu.RUnlock()
	return c != nil && c.Load() > 0
}

// Publish implements message.Publisher: it publishes msgs on GoChannel when the topic
// has a subscriber, and drops them otherwise.
func (b *EmbeddedBus) Publish(topic string, msgs ...*message.Message) error {
	if !b.HasReaders(topic) {
		return nil
	}
	return b.ch.Publish(topic, msgs...)
}

// Subscribe implements message.Subscriber; the subscription ends with ctx or Close.
func (b *EmbeddedBus) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	c := b.counter(topic)
	c.Add(1)
	out, err := b.ch.Subscribe(ctx, topic)
	if err != nil {
		c.Add(-1)
		return nil, err
	}
	context.AfterFunc(ctx, func() { c.Add(-1) })
	return out, nil
}

// Close closes the bus: every subscription's channel closes.
func (b *EmbeddedBus) Close() error { return b.ch.Close() }
