package kafka_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// agedMarshaler is the default marshaler, dating back by an hour the records of
// messages with the metadata entry "old".
type agedMarshaler struct{ kafka.DefaultMarshaler }

func (m agedMarshaler) Marshal(topic string, msg *message.Message) (kafkago.Message, error) {
	rec, err := m.DefaultMarshaler.Marshal(topic, msg)
	if msg.Metadata.Get("old") != "" {
		rec.Time = time.Now().Add(-time.Hour)
	}
	return rec, err
}

// FindRecords reads, on a prefixed topic, the records of the keys it is given
// published since the time it is given (the broker's time index), and nothing of
// other keys or of older records.
func TestFindRecordsOfKeysSinceATime(t *testing.T) {
	c := newCluster(t)
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.Topics.Prefix = uniqueName(t, "find") + "."
		cfg.Marshaler = agedMarshaler{}
	})
	defer pub.Close()
	topic := uniqueName(t, "results")
	msg := func(key, id string, old bool) *message.Message {
		m := sessionMessage(key, "{}")
		m.UUID = id
		if old {
			m.Metadata.Set("old", "1")
		}
		return m
	}
	if err := pub.Publish(topic, msg("a", "a/1", true), msg("d", "d/1", true)); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(topic, msg("a", "a/2", false), msg("b", "b/1", false), msg("c", "c/1", false), msg("a", "a/3", false)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	err := pub.FindRecords(ctx, topic, []string{"a", "b", "d", "e"}, time.Now().Add(-time.Minute), func(key, uuid string, value []byte) {
		got = append(got, key+" "+uuid+" "+string(value))
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"a a/2 {}", "a a/3 {}", "b b/1 {}"}; !slices.Equal(got, want) {
		t.Errorf("found %q; want %q", got, want)
	}
}

// A topic that does not exist holds nothing: FindRecords says so once the cluster
// has not known it for a while, rather than waiting for it until its context ends
// (a takeover on a fresh cluster, whose troupe.results nothing was published on
// yet, waited so for its whole bound).
func TestFindRecordsOfATopicThatDoesNotExistFindsNothing(t *testing.T) {
	c := newCluster(t)
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.Topics.Prefix = uniqueName(t, "absent") + "."
	})
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	called := false
	err := pub.FindRecords(ctx, uniqueName(t, "results"), []string{"a"}, time.Now().Add(-time.Minute), func(string, string, []byte) { called = true })
	if err != nil || called {
		t.Fatalf("FindRecords of a topic that does not exist: %v (found something: %v)", err, called)
	}
	if ctx.Err() != nil {
		t.Fatal("FindRecords waited for its context to end")
	}
}
