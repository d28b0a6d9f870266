package node

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/kafka"
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
//
// A topic that is none of the node's own (a task's reply_topic, which a client
// names) is published in a lane of its own, beside the batches: a reply topic the
// broker refuses (one that does not exist on a broker that creates none, a name
// it will never take) holds no other topic. A lane retries as the batches do
// through an outage (an error without a Kafka code: the broker did not answer)
// and through a temporary Kafka error (a rolling restart) for up to
// replyGiveUp; see publish for what it gives up sooner, logged and
// counted: the results are on troupe.results and in the log. A full lane drops
// a new batch rather than wait (toLane).
// A reply topic that does not exist and that the node may not create
// (ErrReplyTopicNotCreated) is given up at once, with a warning.
type outbox struct {
	pub     message.Publisher
	logger  *slog.Logger
	failed  func()
	retries int
	// replyRetries bounds the attempts of a lane's publish that the broker
	// answered with UNKNOWN_TOPIC_OR_PARTITION (a topic that does not exist).
	replyRetries int
	// notCreated, when set, counts the publishes dropped because their reply
	// topic does not exist and may not be created (ErrReplyTopicNotCreated).
	notCreated func()
	// replyGiveUp bounds the time a lane's publish is retried through another
	// temporary Kafka error (0: for ever).
	replyGiveUp time.Duration
	// replyDropped counts the replies dropped because their lane was full.
	replyDropped atomic.Int64

	lanesMu sync.Mutex
	lanes   map[string]*lane
	lanesWG sync.WaitGroup

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

// replyGiveUp is how long a reply topic's publish is retried through a temporary
// Kafka error other than UNKNOWN_TOPIC_OR_PARTITION before it is given up: longer
// than a rolling restart of the brokers.
const replyGiveUp = 15 * time.Minute

func newOutbox(pub message.Publisher, capacity int, logger *slog.Logger, failed func()) *outbox {
	o := &outbox{pub: pub, logger: logger, failed: failed, retries: 5, replyRetries: 10, replyGiveUp: replyGiveUp, lanes: map[string]*lane{},
		queue: make(chan outMsg, capacity), closing: make(chan struct{}), done: make(chan struct{})}
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
	defer o.lanesWG.Wait()
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
	// topic, messages keep their order. A topic not the node's own goes to its lane.
	var wg sync.WaitGroup
	own := ownTopics()
	for _, topic := range topics {
		if !slices.Contains(own, topic) {
			o.toLane(topic, laneItem{msgs: byTopic[topic]})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.publish(topic, byTopic[topic], nil)
		}()
	}
	wg.Wait()
	// Everything queued before a barrier was in this batch or an earlier one, or
	// is in a lane before the barrier's mark.
	for _, b := range barriers {
		o.lanesMu.Lock()
		lanes := make([]string, 0, len(o.lanes))
		for topic := range o.lanes {
			lanes = append(lanes, topic)
		}
		o.lanesMu.Unlock()
		if len(lanes) == 0 {
			close(b)
			continue
		}
		marks := make([]chan struct{}, len(lanes))
		for i, topic := range lanes {
			marks[i] = make(chan struct{})
			o.toLane(topic, laneItem{flushed: marks[i]})
		}
		go func() {
			for _, m := range marks {
				<-m
			}
			close(b)
		}()
	}
}

// lane publishes the messages of one topic that is not the node's own, in order,
// beside the batches (see outbox). Its goroutine ends once it has nothing queued.
type lane struct {
	items   chan laneItem
	pending int // items sent or about to be, under outbox.lanesMu
	// refusing is set once a publish was given up, until one goes through: each
	// publish is then tried once before it is given up.
	refusing bool
	// stuck is set once a publish was given up after replyGiveUp of temporary
	// errors, until one goes through: each publish meeting a temporary error is
	// then tried once, so that a topic the broker never takes (too few in-sync
	// replicas for good) holds its lane's later batches, and the Flush marks
	// queued behind them, for one replyGiveUp, not one each.
	stuck bool
}

// laneItem is a batch of messages, or a Flush's mark (flushed set), closed once
// everything queued in the lane before it was published or given up.
type laneItem struct {
	msgs    []*message.Message
	flushed chan struct{}
}

// laneDepth bounds the items queued in one lane; past it, a new batch of the
// lane's messages is dropped (the results are on troupe.results and in the
// log), logged and counted, and never waits: a full lane holds no other topic.
const laneDepth = 256

// toLane queues it in topic's lane, starting the lane when it has none. It never
// blocks: a batch of messages a full lane has no room for is dropped, and a
// Flush's mark is queued from a goroutine of its own.
func (o *outbox) toLane(topic string, it laneItem) {
	o.lanesMu.Lock()
	l := o.lanes[topic]
	if l == nil {
		l = &lane{items: make(chan laneItem, laneDepth)}
		o.lanes[topic] = l
		o.lanesWG.Add(1)
		go o.runLane(topic, l)
	}
	select {
	case l.items <- it: // under lanesMu: runLane counts it before it ends
		l.pending++
		o.lanesMu.Unlock()
		return
	default:
	}
	if it.flushed != nil {
		l.pending++
		o.lanesMu.Unlock()
		go func() { l.items <- it }()
		return
	}
	o.lanesMu.Unlock()
	o.replyDropped.Add(1)
	o.failed()
	o.logger.Warn("a task's reply topic has too many messages queued (the broker is not taking them); dropped (the results are on troupe.results and in the log)",
		"topic", topic, "messages", len(it.msgs), "first", it.msgs[0].UUID, "queued", laneDepth)
}

func (o *outbox) runLane(topic string, l *lane) {
	defer o.lanesWG.Done()
	for {
		o.lanesMu.Lock()
		if l.pending == 0 {
			delete(o.lanes, topic)
			o.lanesMu.Unlock()
			return
		}
		o.lanesMu.Unlock()
		it := <-l.items
		if it.flushed != nil {
			close(it.flushed)
		} else {
			o.publish(topic, it.msgs, l)
		}
		o.lanesMu.Lock()
		l.pending--
		o.lanesMu.Unlock()
	}
}

// publish publishes msgs on topic, retrying with backoff. Every topic's publish
// is given up, logged and counted, once it failed o.retries times while the
// outbox closes; a topic of the node's own (lane nil) is retried until then.
//
// A reply topic's (for its lane l, a topic not the node's own) is retried through
// an outage and through a temporary Kafka error (a leader moving in a rolling
// restart: LeaderNotAvailable, NotLeaderForPartition, NotEnoughReplicas,
// RequestTimedOut, KafkaStorageError...) for up to replyGiveUp. It is given up,
// logged and counted, once the broker answered with an error that is no
// temporary one o.retries times, or with UNKNOWN_TOPIC_OR_PARTITION (what a
// topic that does not exist answers on a broker that creates none)
// o.replyRetries times; once, for either, while the lane is refusing (it gave
// one up that way, until one goes through); once for a temporary error while
// the lane is stuck (it gave one up after replyGiveUp, until one goes through);
// at once for any error the broker answered while the outbox closes; at once,
// with a warning, when it does not exist and the node may not create it
// (ErrReplyTopicNotCreated); and at once, with an error, when its name is none
// Kafka takes (kafka.ErrInvalidTopic).
func (o *outbox) publish(topic string, msgs []*message.Message, l *lane) {
	backoff := 50 * time.Millisecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := o.pub.Publish(topic, msgs...)
		if err == nil {
			if l != nil {
				l.refusing, l.stuck = false, false
			}
			return
		}
		if l != nil && o.replyNotCreated(topic, msgs, err) {
			return
		}
		if l != nil && o.replyInvalid(topic, msgs, err) {
			return
		}
		if attempt >= o.retries && o.isClosing() {
			o.dropped.Add(1)
			o.failed()
			o.logger.Error("bus publish failed; the log has these events, live watchers and the sink miss them", "topic", topic, "messages", len(msgs), "attempts", attempt, "err", err)
			return
		}
		if l != nil && o.replyGivenUp(topic, l, msgs, err, attempt, start) {
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

// replyNotCreated gives a reply topic's publish up, with a warning, when err says
// the topic is missing and not the node's to create (ReplyTopics): nothing to
// retry. The results are on troupe.results and in the log.
func (o *outbox) replyNotCreated(topic string, msgs []*message.Message, err error) bool {
	if !errors.Is(err, ErrReplyTopicNotCreated) {
		return false
	}
	if o.notCreated != nil {
		o.notCreated()
	}
	o.logger.Warn("a task's reply topic does not exist and the node may not create it; its messages are dropped (the results are on troupe.results and in the log)",
		"topic", topic, "messages", len(msgs), "first", msgs[0].UUID, "err", err)
	return true
}

// replyInvalid gives a reply topic's publish up, logged and counted, when err says
// Kafka cannot name the topic (kafka.ErrInvalidTopic: over 249 characters once
// the node's --topic-prefix is put before it). The publisher refuses such a name
// itself, before any request, so it never answers as a broker does: it was
// retried as through an outage, for as long as the node ran. The results are on
// troupe.results and in the log.
func (o *outbox) replyInvalid(topic string, msgs []*message.Message, err error) bool {
	if !errors.Is(err, kafka.ErrInvalidTopic) {
		return false
	}
	o.failed()
	o.logger.Error("a task's reply topic is no name Kafka takes; its messages are dropped (the results are on troupe.results and in the log)",
		"topic", topic, "messages", len(msgs), "first", msgs[0].UUID, "err", err)
	return true
}

// replyGivenUp gives a reply topic's publish up, logged and counted, as publish
// says, after attempt attempts since start that ended with err.
func (o *outbox) replyGivenUp(topic string, l *lane, msgs []*message.Message, err error, attempt int, start time.Time) bool {
	answered, temporary := kafkaAnswered(err)
	missing := answered && errors.Is(err, kafkago.UnknownTopicOrPartition)
	refused := answered && !temporary || missing
	giveUp := answered && o.isClosing() ||
		refused && l.refusing ||
		answered && temporary && l.stuck ||
		answered && !temporary && attempt >= o.retries ||
		missing && attempt >= o.replyRetries
	if giveUp {
		// A task's reply_topic the broker will not take, now or for good (a name
		// Kafka takes for an existing topic's, one the node may not write to,
		// one that does not exist on a broker that creates none). The result is
		// on troupe.results and in the log.
		if refused {
			l.refusing = true
		}
		o.failed()
		o.logger.Error("a task's reply topic refuses its messages; given up (the results are on troupe.results and in the log)",
			"topic", topic, "messages", len(msgs), "first", msgs[0].UUID, "attempts", attempt, "temporary", temporary, "err", err)
		return true
	}
	if answered && o.replyGiveUp > 0 && time.Since(start) >= o.replyGiveUp {
		// A temporary error that outlasted any rolling restart.
		l.stuck = true
		o.failed()
		o.logger.Error("a task's reply topic kept failing; given up (the results are on troupe.results and in the log)",
			"topic", topic, "messages", len(msgs), "first", msgs[0].UUID, "attempts", attempt, "for", time.Since(start), "err", err)
		return true
	}
	return false
}

// kafkaAnswered reports whether err carries a Kafka error code (kafka-go's
// Error: the broker answered), and whether that code is a temporary one.
func kafkaAnswered(err error) (answered, temporary bool) {
	var code interface {
		Temporary() bool
		Title() string
	}
	if !errors.As(err, &code) {
		return false, false
	}
	return true, code.Temporary()
}

func (o *outbox) isClosing() bool {
	select {
	case <-o.closing:
		return true
	default:
		return false
	}
}
