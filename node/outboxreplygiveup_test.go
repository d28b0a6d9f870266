package node

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// switchPublisher fails topic "my.replies" with err (nil: takes it), or holds
// it until release is closed; takes every other topic.
type switchPublisher struct {
	mu       sync.Mutex
	err      error
	release  chan struct{}
	attempts atomic.Int64
	got      map[string][]string
	tries    map[string]int // attempts by a batch's first message
}

func (p *switchPublisher) set(err error) { p.mu.Lock(); p.err = err; p.mu.Unlock() }

func (p *switchPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == "my.replies" {
		p.attempts.Add(1)
		p.mu.Lock()
		if p.tries != nil {
			p.tries[msgs[0].UUID]++
		}
		p.mu.Unlock()
		if p.release != nil {
			<-p.release
		}
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got[topic] = append(p.got[topic], m.UUID)
	}
	return nil
}

func (p *switchPublisher) Close() error { return nil }

func (p *switchPublisher) published(topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got[topic]...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A reply topic whose leader moves (a rolling restart of the brokers) answers
// with temporary Kafka codes for a while: its replies were given up after
// replyRetries attempts, and once one was, each later reply was tried once and
// dropped. They are retried now as through an outage (bounded by replyGiveUp
// only), also after a reply to the topic was given up as to a missing topic.
func TestOutboxRetriesAReplyTopicThroughATemporaryKafkaError(t *testing.T) {
	for _, code := range []error{kafkago.LeaderNotAvailable, kafkago.NotLeaderForPartition, kafkago.NotEnoughReplicas, kafkago.RequestTimedOut, kafkago.KafkaStorageError} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			pub := &switchPublisher{err: kafkago.UnknownTopicOrPartition, got: map[string][]string{}}
			o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
			o.retries, o.replyRetries = 2, 3
			defer o.Close()
			// A missing topic: given up after replyRetries.
			if err := o.Publish("my.replies", message.NewMessage("reply-1", nil)); err != nil {
				t.Fatal(err)
			}
			if !o.Flush(20 * time.Second) {
				t.Fatal("a reply to a missing topic not given up")
			}
			if n := pub.attempts.Load(); n != 3 {
				t.Fatalf("my.replies tried %d times; want 3 (replyRetries)", n)
			}
			// Then a leader moving: retried past replyRetries, until it goes through.
			pub.set(code)
			if err := o.Publish("my.replies", message.NewMessage("reply-2", nil)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "reply-2 not retried past replyRetries (given up, or tried once as the lane was refusing)",
				func() bool { return pub.attempts.Load() >= 3+5 })
			if got := pub.published("my.replies"); len(got) != 0 {
				t.Fatalf("published %v", got)
			}
			pub.set(nil)
			if !o.Flush(20 * time.Second) {
				t.Fatal("not flushed once the leader is back")
			}
			if got := pub.published("my.replies"); len(got) != 1 || got[0] != "reply-2" {
				t.Fatalf("my.replies got %v; want [reply-2]", got)
			}
		})
	}
}

// A temporary Kafka error that lasts past replyGiveUp gives the reply up.
func TestOutboxGivesAReplyUpAfterReplyGiveUp(t *testing.T) {
	pub := &switchPublisher{err: kafkago.LeaderNotAvailable, got: map[string][]string{}}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
	o.retries, o.replyRetries, o.replyGiveUp = 2, 2, 300*time.Millisecond
	defer o.Close()
	if err := o.Publish("my.replies", message.NewMessage("reply-1", nil)); err != nil {
		t.Fatal(err)
	}
	if !o.Flush(20 * time.Second) {
		t.Fatal("not given up after replyGiveUp")
	}
	if n := pub.attempts.Load(); n <= 2 {
		t.Errorf("tried %d times; want retried past replyRetries until replyGiveUp", n)
	}
}

// A reply topic retried for ever (an outage) filled its lane, and the next
// batch for it then blocked the outbox's loop: troupe.results and every other
// topic stopped. A full lane drops the new reply now, counted.
func TestOutboxFullReplyLaneDropsAndHoldsNothing(t *testing.T) {
	pub := &switchPublisher{release: make(chan struct{}), got: map[string][]string{}}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
	o.retries = 1
	n := laneDepth + 20
	for i := range n {
		if err := o.Publish("my.replies", message.NewMessage(fmt.Sprint("reply-", i), nil)); err != nil {
			t.Fatal(err)
		}
		if err := o.Publish(messages.TopicResults, message.NewMessage(fmt.Sprint("result-", i), nil)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("result-%d not published: the full reply lane holds the outbox", i),
			func() bool { return len(pub.published(messages.TopicResults)) == i+1 })
	}
	if d := o.replyDropped.Load(); d == 0 {
		t.Error("no reply counted as dropped")
	}
	close(pub.release)
	o.Close()
	if got, d := len(pub.published("my.replies")), int(o.replyDropped.Load()); got+d != n {
		t.Errorf("replies published %d + dropped %d; want %d", got, d, n)
	}
}

// A reply topic the broker answers with a temporary error for good (a topic of
// replication 1 under min.insync.replicas 2: NOT_ENOUGH_REPLICAS) held each of
// its lane's batches for a whole replyGiveUp, and every Flush mark behind them
// (the publication marks, a hand-over's flush) for as many: a full lane for days.
// Once one batch was given up so, the next ones meeting a temporary error are
// tried once, until one goes through.
func TestOutboxStuckReplyTopicHoldsOneGiveUpNotOneEach(t *testing.T) {
	pub := &switchPublisher{err: kafkago.NotEnoughReplicas, got: map[string][]string{}, tries: map[string]int{}}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
	o.retries, o.replyRetries, o.replyGiveUp = 2, 2, 300*time.Millisecond
	defer o.Close()
	// A second batch queued while the first is retried, as a steady stream of
	// replies queues them.
	if err := o.Publish("my.replies", message.NewMessage("reply-1", nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reply-1 never tried", func() bool { return pub.attempts.Load() > 0 })
	if err := o.Publish("my.replies", message.NewMessage("reply-2", nil)); err != nil {
		t.Fatal(err)
	}
	if !o.Flush(20 * time.Second) {
		t.Fatal("not given up")
	}
	pub.mu.Lock()
	tries := maps.Clone(pub.tries)
	pub.mu.Unlock()
	if tries["reply-1"] <= 2 {
		t.Errorf("the first batch was tried %d times; want retried until replyGiveUp", tries["reply-1"])
	}
	if tries["reply-2"] != 1 {
		t.Errorf("reply-2, queued behind a batch given up after replyGiveUp, was tried %d times; want once", tries["reply-2"])
	}
}
