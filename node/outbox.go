package node

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
)

// outbox publishes what session actors hand it (their events on troupe.events, task
// results on troupe.results and reply topics) in the background, so that a session
// does not wait for the broker after each step: its events are durable in the log
// already, and the bus copy feeds live watchers, the sink and Kafka clients.
//
// Messages are published in the order they were handed over (so each session's events
// stay in order), and whatever is queued when the publisher is free goes out together:
// one Publish per topic, which on Kafka is one produce request per partition instead
// of one round trip per step of every session. A failed publish (a broker outage) is
// retried with backoff for as long as it takes; meanwhile the queue fills and then
// blocks the sessions (back-pressure), so results wait for the broker instead of being
// dropped. Only once the node is closing does a publish give up after a few attempts,
// logged and counted.
type outbox struct {
	pub     message.Publisher
	logger  *slog.Logger
	failed  func()
	retries int

	queue     chan outMsg
	closing   chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	mu        sync.RWMutex // held for reading by Publish, for writing by Close
	closed    bool
	// dropped counts the batches given up (only while closing): after one, Flush
	// never reports everything published.
	dropped atomic.Int64
}

// outMsg is a message to publish, or a Flush's barrier (flushed set, no message):
// the run loop closes flushed once everything queued before it was published.
type outMsg struct {
	topic   string
	msg     *message.Message
	flushed chan struct{}
}

// errOutboxClosed is returned by Publish after Close.
var errOutboxClosed = errors.New("node: outbox is closed")

const outboxBatch = 1024

func newOutbox(pub message.Publisher, capacity int, logger *slog.Logger, failed func()) *outbox {
	o := &outbox{pub: pub, logger: logger, failed: failed, retries: 5, queue: make(chan outMsg, capacity), closing: make(chan struct{}), done: make(chan struct{})}
	go o.run()
	return o
}

var _ actors.TopicReaders = (*outbox)(nil)

// HasReaders implements actors.TopicReaders: whether the bus has readers of topic, when
// it can tell (the embedded bus); true otherwise.
func (o *outbox) HasReaders(topic string) bool {
	r, ok := o.pub.(actors.TopicReaders)
	return !ok || r.HasReaders(topic)
}

// Publish queues msgs for topic; it blocks while the queue is full.
func (o *outbox) Publish(topic string, msgs ...*message.Message) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		return errOutboxClosed
	}
	for _, m := range msgs {
		o.queue <- outMsg{topic: topic, msg: m}
	}
	return nil
}

// Close publishes what is queued, then stops. Call it once nothing publishes any more.
func (o *outbox) Close() error {
	o.closeOnce.Do(func() {
		close(o.closing)
		o.mu.Lock()
		o.closed = true
		close(o.queue)
		o.mu.Unlock()
		<-o.done
	})
	return nil
}

// Flush waits until everything handed to the outbox before it was published, up
// to timeout, and reports whether it was: false if the time ran out (a broker
// outage: the outbox keeps retrying) or if the outbox ever gave a batch up (at
// shutdown). A sharded node flushes before it marks its partitions released.
func (o *outbox) Flush(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	barrier := make(chan struct{})
	o.mu.RLock()
	if o.closed {
		o.mu.RUnlock()
		<-o.done // Close published, or gave up, everything queued
		return o.dropped.Load() == 0
	}
	select {
	case o.queue <- outMsg{flushed: barrier}:
		o.mu.RUnlock()
	case <-t.C:
		o.mu.RUnlock()
		return false
	}
	select {
	case <-barrier:
		return o.dropped.Load() == 0
	case <-t.C:
		return false
	}
}

func (o *outbox) run() {
	defer close(o.done)
	batch := make([]outMsg, 0, outboxBatch)
	for first := range o.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < outboxBatch {
			select {
			case m, ok := <-o.queue:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		o.flush(batch)
	}
}

// flush publishes a batch: one Publish per topic.
func (o *outbox) flush(batch []outMsg) {
	var (
		topics   []string
		barriers []chan struct{}
	)
	byTopic := map[string][]*message.Message{}
	for _, m := range batch {
		if m.flushed != nil {
			barriers = append(barriers, m.flushed)
			continue
		}
		if _, ok := byTopic[m.topic]; !ok {
			topics = append(topics, m.topic)
		}
		byTopic[m.topic] = append(byTopic[m.topic], m.msg)
	}
	// Topics go out at once (a task's result need not wait for its events); within a
	// topic, messages keep their order.
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.publish(topic, byTopic[topic])
		}()
	}
	wg.Wait()
	// Everything queued before a barrier was in this batch or an earlier one.
	for _, b := range barriers {
		close(b)
	}
}

// publish publishes msgs on topic, retrying until the broker takes them or the outbox closes.
func (o *outbox) publish(topic string, msgs []*message.Message) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := o.pub.Publish(topic, msgs...)
		if err == nil {
			return
		}
		if attempt >= o.retries && o.isClosing() {
			o.dropped.Add(1)
			o.failed()
			o.logger.Error("bus publish failed; the log has these events, live watchers and the sink miss them", "topic", topic, "messages", len(msgs), "attempts", attempt, "err", err)
			return
		}
		if attempt >= o.retries && refusedForGood(topic, err) {
			// A task's reply_topic the broker will never take (a name Kafka takes
			// for an existing topic's, one the node may not write to): retried, it
			// held every later batch, so no event or result of any session reached
			// the bus. The result is on troupe.results and in the log.
			o.failed()
			o.logger.Error("a task's reply topic refuses its messages for good; given up (the results are on troupe.results and in the log)",
				"topic", topic, "messages", len(msgs), "attempts", attempt, "err", err)
			return
		}
		if attempt == o.retries {
			o.failed()
		}
		o.logger.Warn("bus publish failed; retrying", "topic", topic, "messages", len(msgs), "attempt", attempt, "err", err)
		time.Sleep(backoff)
		backoff = min(backoff*2, 5*time.Second)
	}
}

// refusedForGood reports a publish to a topic other than the node's own (a task's
// reply_topic) that the broker answered with a Kafka error that is no outage
// (InvalidTopic, TopicAuthorizationFailed, …: its Temporary is false). An error
// without a Kafka code (a connection refused, a timeout) or a temporary one (a
// leader moving, a topic not created yet) is an outage, retried as long as it
// lasts; so is any error of the node's own topics.
func refusedForGood(topic string, err error) bool {
	if slices.Contains(ownTopics(), topic) {
		return false
	}
	// kafka-go's Error: a code the broker answered, which says whether it is
	// worth another attempt.
	var code interface {
		Temporary() bool
		Title() string
	}
	return errors.As(err, &code) && !code.Temporary()
}

func (o *outbox) isClosing() bool {
	select {
	case <-o.closing:
		return true
	default:
		return false
	}
}
