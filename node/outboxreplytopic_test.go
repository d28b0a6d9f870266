package node

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// refusingPublisher refuses every message of one topic with a Kafka error that is
// no outage (the broker will never take it), and records the others.
type refusingPublisher struct {
	refused  string
	err      error
	attempts atomic.Int64
	mu       sync.Mutex
	got      map[string][]string
}

func (p *refusingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.refused {
		p.attempts.Add(1)
		return p.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got[topic] = append(p.got[topic], m.UUID)
	}
	return nil
}

func (p *refusingPublisher) Close() error { return nil }

func (p *refusingPublisher) published(topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got[topic]...)
}

// A task's reply_topic that the broker refuses for good (my_replies beside an
// existing my.replies, which Kafka takes for the same name: InvalidTopic; a topic
// the node may not write to) held the node's outbox for ever: the outbox
// publishes one batch after another, and retried that topic's until the broker
// took it, so no later event or result of any session reached the bus. The
// reply topic's copy is given up after the outbox's retries (the result is on
// troupe.results and in the log), and the rest goes on.
func TestOutboxGivesUpAReplyTopicTheBrokerRefusesForGood(t *testing.T) {
	for name, err := range map[string]error{
		"invalid topic":       kafkago.InvalidTopic,
		"not authorized":      kafkago.TopicAuthorizationFailed,
		"invalid replication": kafkago.InvalidReplicationFactor,
	} {
		t.Run(name, func(t *testing.T) {
			pub := &refusingPublisher{refused: "my_replies", err: err, got: map[string][]string{}}
			o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
			o.retries = 2
			defer o.Close()
			if err := o.Publish("my_replies", message.NewMessage("reply-1", nil)); err != nil {
				t.Fatal(err)
			}
			// Later results come in later batches.
			deadline := time.Now().Add(10 * time.Second)
			for pub.attempts.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the reply topic was never tried")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := o.Publish(messages.TopicResults, message.NewMessage("result-1", nil)); err != nil {
				t.Fatal(err)
			}
			if err := o.Publish(messages.TopicResults, message.NewMessage("result-2", nil)); err != nil {
				t.Fatal(err)
			}
			for len(pub.published(messages.TopicResults)) < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("results published: %v; want result-1 and result-2 past the refused reply topic", pub.published(messages.TopicResults))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// The node's own topics are retried as before, and a reply topic's temporary
// refusal for a while (replyRetries): nothing is given up within a second.
func TestOutboxRetriesItsOwnTopicsAndOutages(t *testing.T) {
	for name, c := range map[string]struct {
		topic string
		err   error
	}{
		"own topic refused":     {messages.TopicResults, kafkago.TopicAuthorizationFailed},
		"reply topic, leader":   {"my.replies", kafkago.NotLeaderForPartition},
		"reply topic, no topic": {"my.replies", kafkago.UnknownTopicOrPartition},
	} {
		t.Run(name, func(t *testing.T) {
			pub := &refusingPublisher{refused: c.topic, err: c.err, got: map[string][]string{}}
			o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
			o.retries = 2
			if err := o.Publish(c.topic, message.NewMessage("m-1", nil)); err != nil {
				t.Fatal(err)
			}
			if o.Flush(time.Second) {
				t.Errorf("%s refused with %v: flushed; want it retried", c.topic, c.err)
			}
			o.Close()
		})
	}
}

// A reply_topic of up to 249 characters is a legal name, but not behind a node's
// --topic-prefix that makes it longer than Kafka's 249: the publisher refuses such
// a name itself, without asking the broker, and the outbox took that for an
// outage and retried it for as long as the node ran (a warning every 5 s, and the
// node's flushes behind the lane waiting on it). It is given up at once now,
// counted as a failed publish.
func TestOutboxGivesUpAReplyTopicKafkaCannotName(t *testing.T) {
	topic := "replies." + strings.Repeat("x", 241)
	err := fmt.Errorf("%w: topic %q with prefix %q is %d characters long, more than Kafka's %d",
		kafka.ErrInvalidTopic, topic, "prod.", len("prod.")+len(topic), kafka.MaxTopicNameLength)
	pub := &refusingPublisher{refused: topic, err: err, got: map[string][]string{}}
	var failed atomic.Int64
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() { failed.Add(1) })
	defer o.Close()
	if err := o.Publish(topic, message.NewMessage("reply-1", nil)); err != nil {
		t.Fatal(err)
	}
	if err := o.Publish(messages.TopicResults, message.NewMessage("result-1", nil)); err != nil {
		t.Fatal(err)
	}
	if !o.Flush(20 * time.Second) {
		t.Fatalf("not flushed: the reply topic Kafka cannot name was retried (%d attempts)", pub.attempts.Load())
	}
	if n := pub.attempts.Load(); n != 1 {
		t.Errorf("the reply topic was tried %d times; want once", n)
	}
	if n := failed.Load(); n != 1 {
		t.Errorf("failed publishes counted %d; want 1", n)
	}
	if got := pub.published(messages.TopicResults); len(got) != 1 || got[0] != "result-1" {
		t.Errorf("troupe.results got %v; want [result-1]", got)
	}
}
