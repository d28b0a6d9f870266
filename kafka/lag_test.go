package kafka_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
)

// lagOf returns the lags sub reports for topic, by partition.
func lagOf(sub *kafka.Subscriber, topic string) map[int]int64 {
	lags := map[int]int64{}
	sub.ConsumerLag(func(tp string, partition int, lag int64) {
		if tp == topic {
			lags[partition] = lag
		}
	})
	return lags
}

// waitLag waits until sub reports, for every partition of topic, the lag want
// gives it (10 s at most), and returns the lags it saw last.
func waitLag(t *testing.T, sub *kafka.Subscriber, topic string, want func(partition int) int64) map[int]int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lags := lagOf(sub, topic)
		ok := len(lags) == testPartitions
		for p := range testPartitions {
			ok = ok && lags[p] == want(p)
		}
		if ok {
			return lags
		}
		if time.Now().After(deadline) {
			t.Fatalf("lags of %s after 10 s: %v", topic, lags)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A group member reports the lag of each partition it consumes: the records after
// its acked prefix, up to the high watermark. Idle partitions are at 0 from the
// start; a partition whose records are not acked yet lags by them, and goes back to
// 0 once they are.
func TestConsumerLagPerPartition(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.lag.")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	sub := c.subscriber(t, uniqueName(t, "g-"), nil)
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	waitLag(t, sub, topic, func(int) int64 { return 0 })

	const records = 5
	msgs := make([]*message.Message, records)
	for i := range msgs {
		msgs[i] = sessionMessage("s-lag", "m")
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	first := receive(t, ch, 30*time.Second)
	hot := kafka.Partition([]byte("s-lag"), testPartitions)
	// One message out, none acked: the partition lags by all of them.
	waitLag(t, sub, topic, func(p int) int64 {
		if p == hot {
			return records
		}
		return 0
	})
	first.Ack()
	for range records - 1 {
		receive(t, ch, 30*time.Second).Ack()
	}
	waitLag(t, sub, topic, func(int) int64 { return 0 })
}
