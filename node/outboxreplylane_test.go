package node

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A task's reply_topic whose produce fails with an error kafka-go calls
// temporary (a topic that does not exist on a broker that creates none:
// UNKNOWN_TOPIC_OR_PARTITION; a leader that never comes) was retried for ever,
// and the outbox publishes one batch after another: every later event and result
// of every session waited behind it. Reply topics are published beside the
// node's own topics now (a lane each): the bad one is retried a bounded number
// of times and then given up, logged and counted, while the rest flows.
func TestOutboxReplyTopicFailingForNowDoesNotHoldTheOthers(t *testing.T) {
	for name, err := range map[string]error{
		"no such topic": kafkago.UnknownTopicOrPartition,
	} {
		t.Run(name, func(t *testing.T) {
			pub := &refusingPublisher{refused: "my.replies", err: err, got: map[string][]string{}}
			o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
			o.retries, o.replyRetries = 2, 4
			defer o.Close()
			if err := o.Publish("my.replies", message.NewMessage("reply-1", nil)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for pub.attempts.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the reply topic was never tried")
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, m := range []struct{ topic, id string }{{messages.TopicResults, "result-1"}, {"other.replies", "reply-2"}, {messages.TopicResults, "result-2"}} {
				if err := o.Publish(m.topic, message.NewMessage(m.id, nil)); err != nil {
					t.Fatal(err)
				}
			}
			for len(pub.published(messages.TopicResults)) < 2 || len(pub.published("other.replies")) < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("published: results %v, other.replies %v; want them past the failing reply topic",
						pub.published(messages.TopicResults), pub.published("other.replies"))
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The failing topic is given up after its retries: everything is flushed.
			if !o.Flush(20 * time.Second) {
				t.Fatalf("not flushed after %d attempts of my.replies", pub.attempts.Load())
			}
			if n := pub.attempts.Load(); n != 4 {
				t.Errorf("my.replies tried %d times; want 4 (replyRetries)", n)
			}
		})
	}
}

// A reply topic during an outage (no Kafka error code: the broker did not
// answer) is retried as long as the outage lasts, as the node's own topics are,
// but beside them.
func TestOutboxRetriesAReplyTopicThroughAnOutageBesideTheOthers(t *testing.T) {
	pub := &refusingPublisher{refused: "my.replies", err: errOutage, got: map[string][]string{}}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
	o.retries, o.replyRetries = 2, 2
	if err := o.Publish("my.replies", message.NewMessage("reply-1", nil)); err != nil {
		t.Fatal(err)
	}
	if err := o.Publish(messages.TopicResults, message.NewMessage("result-1", nil)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(pub.published(messages.TopicResults)) < 1 || pub.attempts.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("results %v, my.replies tried %d times; want the result out and the reply retried past replyRetries", pub.published(messages.TopicResults), pub.attempts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if o.Flush(100 * time.Millisecond) {
		t.Error("flushed while the reply topic's outage lasts; want it retried")
	}
	o.Close()
}

var errOutage = &outageError{}

type outageError struct{}

func (*outageError) Error() string { return "dial tcp: connection refused" }
