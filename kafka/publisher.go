package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"
)

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("kafka: publisher is closed")

// topicWait bounds how long the first Publish to a topic waits for the cluster's
// metadata to show it.
const topicWait = 10 * time.Second

// Publisher publishes Watermill messages to Kafka with kafka-go's protocol client
// (one produce request per leader broker, shared by the Publish calls made
// meanwhile). It is safe for concurrent use.
type Publisher struct {
	cfg       PublisherConfig
	logger    watermill.LoggerAdapter
	transport *kafkago.Transport
	routes    *routes // the transport's, refreshed when a partition's leader moved
	addr      net.Addr
	admin     admin
	reach     *reach   // whether the brokers can be reached (Reachable)
	ready     sync.Map // topic -> struct{}: created (when configured) and known
	queues    sync.Map // topic -> *produceQueue: the Publish calls waiting for a produce

	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. It does not connect until the first Publish.
func NewPublisher(cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{"component": "kafka.Publisher"})
	tr := newTransport(cfg.Brokers, cfg.ClientID, cfg.DialTimeout, cfg.MetadataMaxAge)
	addr := kafkago.TCP(cfg.Brokers...)
	p := &Publisher{
		cfg:       cfg,
		logger:    logger,
		transport: tr,
		routes:    &routes{transport: tr},
		admin:     admin{client: &kafkago.Client{Addr: addr, Transport: tr, Timeout: cfg.WriteTimeout}, layout: cfg.Topics},
		addr:      addr,
		reach:     &reach{brokers: cfg.Brokers, clientID: cfg.ClientID},
	}
	return p, nil
}

// Publish writes msgs to topic (the Kafka topic Topics.Prefix + topic) and returns
// once every in-sync replica of each partition has the records (acks=all), or with
// an error. The messages of one call are sent at once, as one batch per partition
// (see produce), together with those of the calls to topic made while another's
// produce was in flight (see produceQueue); a batch that failed with a temporary
// error is sent again, up to MaxAttempts times. On error, some of the messages may
// have been written: publish them again (consumers dedupe by message UUID). Publish
// does not look at the messages' contexts; PublishTimeout bounds it.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.publish(topic, -1, msgs)
}

// PublishToPartition is Publish to one partition of topic, whatever the messages'
// keys: a node forwarding a task to its session's partition (node.Bus) computes that
// partition by the partition count of its group's assignment, which may differ for a
// while from the count this Publisher's metadata says (partitions were added to the
// topic: producers and the group learn it at different times); placed by the key,
// the copy could land on the partition it was read from, and be forwarded again. A
// partition the metadata does not know yet is an error once the metadata was read
// again (ErrUnknownPartition): publish it again later.
func (p *Publisher) PublishToPartition(topic string, partition int, msgs ...*message.Message) error {
	if partition < 0 {
		return fmt.Errorf("kafka: publish to partition %d of %s: %w", partition, topic, ErrUnknownPartition)
	}
	return p.publish(topic, partition, msgs)
}

// ErrUnknownPartition is the error of PublishToPartition to a partition the topic
// does not have, as far as the Publisher's metadata says.
var ErrUnknownPartition = errors.New("no such partition in the topic's metadata")

// publish is Publish (partition < 0: each message to its key's partition) and
// PublishToPartition.
func (p *Publisher) publish(topic string, partition int, msgs []*message.Message) error {
	if topic == "" {
		return errors.New("kafka: publish to an empty topic name")
	}
	wire, err := p.cfg.Topics.wire(topic)
	if err != nil {
		return err
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrPublisherClosed
	}
	p.inflight.Add(1)
	p.mu.RUnlock()
	defer p.inflight.Done()
	if len(msgs) == 0 {
		return nil
	}

	deadline := time.Now().Add(p.cfg.PublishTimeout)
	if _, ok := p.ready.Load(wire); !ok {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := p.prepare(ctx, topic, wire)
		cancel()
		if err != nil {
			p.reach.wrote(err)
			if uerr := p.reach.unreachable(wire, err); uerr != nil {
				return uerr
			}
			return err
		}
	}
	recs := make([]kafkago.Message, len(msgs))
	if dm, ok := p.cfg.Marshaler.(DefaultMarshaler); ok {
		if err := dm.marshalAll(topic, msgs, recs); err != nil {
			return err
		}
		for i := range recs {
			recs[i].Topic = wire
		}
	} else {
		for i, msg := range msgs {
			rec, err := p.cfg.Marshaler.Marshal(topic, msg)
			if err != nil {
				return fmt.Errorf("kafka: marshal message %s for %s: %w", msg.UUID, topic, err)
			}
			rec.Topic = wire
			rec.Partition, rec.Offset = 0, 0
			recs[i] = rec
		}
	}
	if partition < 0 {
		err = p.produceShared(deadline, wire, recs)
	} else {
		err = p.produce(deadline, wire, recs, partition)
	}
	p.reach.wrote(err)
	if err != nil {
		if uerr := p.reach.unreachable(wire, err); uerr != nil {
			// What failed is the connection to the brokers, whatever the error
			// of the request that found out (see reach.unreachable).
			return uerr
		}
		return publishError(wire, msgs, err)
	}
	switch {
	case !logs(p.logger, watermill.TraceLogLevel):
	case len(msgs) == 1:
		p.logger.Trace("published", watermill.LogFields{"topic": wire, "message_uuid": msgs[0].UUID})
	default:
		p.logger.Trace("published", watermill.LogFields{"topic": wire, "messages": len(msgs)})
	}
	return nil
}

// prepare creates the Kafka topic wire (topic with the prefix) if the layout says
// so and waits until the cluster metadata knows it, once per topic.
func (p *Publisher) prepare(ctx context.Context, topic, wire string) error {
	if _, ok := p.ready.Load(wire); ok {
		return nil
	}
	if _, err := p.admin.ensureTopic(ctx, topic, wire); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, topicWait)
	defer cancel()
	if _, err := p.admin.partitions(wctx, wire); err != nil {
		return err
	}
	p.ready.Store(wire, struct{}{})
	return nil
}

func publishError(topic string, msgs []*message.Message, err error) error {
	var werr kafkago.WriteErrors
	if !errors.As(err, &werr) {
		return fmt.Errorf("kafka: publish %d messages to %s: %w", len(msgs), topic, err)
	}
	var first error
	for _, e := range werr {
		if e != nil {
			first = e
			break
		}
	}
	return fmt.Errorf("kafka: publish to %s: %d of %d messages failed (others may be written): %w", topic, werr.Count(), len(msgs), first)
}

// Close stops accepting messages, waits for the Publish calls in flight (each is
// synchronous, so nothing else is buffered) and releases the connections. It is
// idempotent and returns within CloseTimeout.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		done := make(chan error, 1)
		go func() {
			p.inflight.Wait()
			p.transport.CloseIdleConnections()
			done <- nil
		}()
		t := time.NewTimer(p.cfg.CloseTimeout)
		defer t.Stop()
		select {
		case err := <-done:
			p.closeErr = err
		case <-t.C:
			p.closeErr = fmt.Errorf("kafka: publisher close: publishes still in flight after %s", p.cfg.CloseTimeout)
		}
	})
	return p.closeErr
}

// LevelLogger is a watermill.LoggerAdapter that can tell whether it keeps the
// records of a level (the node's bus logger). kafka-go's clients log a line for
// every fetch, commit and connection; the Publisher and Subscriber format a line
// only when their logger keeps its level: when it is a LevelLogger that says so,
// or any other adapter but watermill.NopLogger, which keeps nothing.
type LevelLogger interface {
	watermill.LoggerAdapter
	// Enabled reports whether records of level are written now.
	Enabled(level watermill.LogLevel) bool
}

// logs reports whether l may keep a record of level.
func logs(l watermill.LoggerAdapter, level watermill.LogLevel) bool {
	switch l := l.(type) {
	case watermill.NopLogger, *watermill.NopLogger:
		return false
	case LevelLogger:
		return l.Enabled(level)
	}
	return true
}

// traceLogger passes kafka-go's log lines to l at TRACE, formatted only if l keeps them.
func traceLogger(l watermill.LoggerAdapter) kafkago.Logger {
	return kafkago.LoggerFunc(func(msg string, args ...any) {
		if logs(l, watermill.TraceLogLevel) {
			l.Trace("kafka-go: "+fmt.Sprintf(msg, args...), nil)
		}
	})
}

// debugLogger passes kafka-go's error lines to l at DEBUG, formatted only if l keeps them.
func debugLogger(l watermill.LoggerAdapter) kafkago.Logger {
	return kafkago.LoggerFunc(func(msg string, args ...any) {
		if logs(l, watermill.DebugLogLevel) {
			l.Debug("kafka-go: "+fmt.Sprintf(msg, args...), nil)
		}
	})
}
