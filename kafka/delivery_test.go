package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// publishSessions publishes perSession messages for each session, in order, one
// Publish call per message, and returns each session's message UUIDs in order.
func publishSessions(t *testing.T, pub message.Publisher, topic string, sessions []string, perSession int) map[string][]string {
	t.Helper()
	order := map[string][]string{}
	for i := range perSession {
		for _, sid := range sessions {
			msg := sessionMessage(sid, fmt.Sprintf("%s#%d", sid, i))
			if err := pub.Publish(topic, msg); err != nil {
				t.Fatalf("publish %s: %v", msg.Payload, err)
			}
			order[sid] = append(order[sid], msg.UUID)
		}
	}
	return order
}

// TestNackRedeliversBeforeLaterMessages nacks every third message once and checks,
// per session (one session, one partition), that a nacked message comes back
// before anything published after it, and that the acked order is the published
// order. s-1 and s-3 are on different partitions of a 4-partition topic.
func TestNackRedeliversBeforeLaterMessages(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.nack.")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, uniqueName(t, "g-"), nil)
	defer closeAll(t, pub, sub)
	sessions := []string{"s-1", "s-3"}
	if kafka.Partition([]byte("s-1"), testPartitions) == kafka.Partition([]byte("s-3"), testPartitions) {
		t.Fatal("test sessions share a partition")
	}
	want := publishSessions(t, pub, topic, sessions, 15)

	ch, err := sub.Subscribe(testContext(t, 2*time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	delivered := map[string][]string{} // session -> UUIDs in delivery order
	acked := map[string][]string{}
	nacked := map[string]bool{}
	for total := 0; total < 30; {
		msg := receive(t, ch, 30*time.Second)
		sid := msg.Metadata.Get("session_id")
		delivered[sid] = append(delivered[sid], msg.UUID)
		idx := slices.Index(want[sid], msg.UUID)
		if idx%3 == 0 && !nacked[msg.UUID] {
			nacked[msg.UUID] = true
			msg.Nack()
			continue
		}
		acked[sid] = append(acked[sid], msg.UUID)
		msg.Ack()
		total++
	}
	for _, sid := range sessions {
		if !slices.Equal(acked[sid], want[sid]) {
			t.Errorf("session %s: acked order differs from published order\nacked: %v\nwant:  %v", sid, acked[sid], want[sid])
		}
		d := delivered[sid]
		for i := 0; i+1 < len(d); i++ {
			if nacked[d[i]] && slices.Index(d, d[i]) == i && d[i+1] != d[i] {
				t.Errorf("session %s: message %d was nacked, then %s came instead of it", sid, slices.Index(want[sid], d[i]), d[i+1])
			}
		}
	}
	noMessage(t, ch, 300*time.Millisecond)
}

// TestPartitionsAreIndependent holds a message of one partition without acking it:
// the next message of that partition must wait, another partition's must not.
func TestPartitionsAreIndependent(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.partitions.")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, uniqueName(t, "g-"), nil)
	defer closeAll(t, pub, sub)
	first := publishSessions(t, pub, topic, []string{"s-1"}, 2)["s-1"]
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, ch, 30*time.Second)
	if held.UUID != first[0] {
		t.Fatalf("got %s first, want the first message of s-1", held.Payload)
	}
	other := publishSessions(t, pub, topic, []string{"s-3"}, 1)["s-3"]
	if got := receive(t, ch, 30*time.Second); got.UUID != other[0] {
		t.Fatalf("while s-1's first message is not acked, got %s; want s-3's message", got.Payload)
	} else {
		got.Ack()
	}
	noMessage(t, ch, 500*time.Millisecond) // s-1's second message waits
	held.Ack()
	if got := receive(t, ch, 30*time.Second); got.UUID != first[1] {
		t.Fatalf("after the ack, got %s; want s-1's second message", got.Payload)
	} else {
		got.Ack()
	}
}

// TestCommitAfterAck: an unacked message comes again to the group's next consumer;
// an acked one does not.
func TestCommitAfterAck(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.commit.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	consume := func(t *testing.T, ack bool) *message.Message {
		t.Helper()
		sub := c.subscriber(t, group, nil)
		ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
		if err != nil {
			t.Fatal(err)
		}
		msg := receive(t, ch, 30*time.Second)
		if ack {
			msg.Ack()
		}
		closeAll(t, sub)
		if _, open := <-ch; open {
			t.Fatal("channel open after Close")
		}
		return msg
	}

	a := sessionMessage("s-1", "A")
	if err := pub.Publish(topic, a); err != nil {
		t.Fatal(err)
	}
	if got := consume(t, false); got.UUID != a.UUID {
		t.Fatalf("first consumer got %s, want A", got.Payload)
	}
	if got := consume(t, true); got.UUID != a.UUID {
		t.Fatalf("A was not acked, yet the next consumer got %s", got.Payload)
	}
	b := sessionMessage("s-1", "B")
	if err := pub.Publish(topic, b); err != nil {
		t.Fatal(err)
	}
	if got := consume(t, true); got.UUID != b.UUID {
		t.Fatalf("A was acked and committed, yet the next consumer got %s first", got.Payload)
	}

	// Without a group nothing is committed: a new subscriber starts from the
	// earliest record again.
	sub := c.subscriber(t, "", nil)
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 30*time.Second); got.UUID != a.UUID {
		t.Fatalf("a subscriber without a group got %s first, want A", got.Payload)
	}
}

// TestRebalanceKeepsOrderPerSession starts a second group member while the first is
// consuming. Every message must be acked once, in published order per session:
// the member giving up a partition commits what was acked before the new owner
// starts.
func TestRebalanceKeepsOrderPerSession(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.rebalance.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	sessions := []string{"s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "s-7", "s-8"}
	const perSession = 40
	want := publishSessions(t, pub, topic, sessions, perSession)
	ctx := testContext(t, 3*time.Minute)

	var mu sync.Mutex
	acked := map[string][]string{}
	total := 0
	perMember := make([]int, 2)
	done := make(chan struct{})
	consume := func(member int, ch <-chan *message.Message) {
		for msg := range ch {
			time.Sleep(5 * time.Millisecond) // slow enough for the second member to join mid-stream
			mu.Lock()
			sid := msg.Metadata.Get("session_id")
			acked[sid] = append(acked[sid], msg.UUID)
			perMember[member]++
			total++
			if total == len(sessions)*perSession {
				close(done)
			}
			mu.Unlock()
			msg.Ack()
		}
	}
	sub1 := c.subscriber(t, group, nil)
	ch1, err := sub1.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	go consume(0, ch1)
	for {
		mu.Lock()
		n := total
		mu.Unlock()
		if n >= 40 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("first member consumed %d messages before the deadline", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	sub2 := c.subscriber(t, group, nil)
	ch2, err := sub2.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	go consume(1, ch2)
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("%d of %d messages acked before the deadline", total, len(sessions)*perSession)
	}
	closeAll(t, sub1, sub2)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("acked by member 1: %d, by member 2: %d", perMember[0], perMember[1])
	if perMember[1] == 0 {
		t.Error("the second member got no partition: no rebalance happened while messages were in flight")
	}
	for _, sid := range sessions {
		if !slices.Equal(acked[sid], want[sid]) {
			t.Errorf("session %s: %d acked, want %d in published order\nacked: %v\nwant:  %v", sid, len(acked[sid]), len(want[sid]), acked[sid], want[sid])
		}
	}
}

// TestClose checks Close on both sides: idempotent, channels closed, later calls
// refused, and a message held without Ack does not block it.
func TestClose(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.close.")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, uniqueName(t, "g-"), nil)
	if err := pub.Publish(topic, sessionMessage("s-1", "x")); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, ch, 30*time.Second) // never acked
	closed := make(chan struct{})
	go func() {
		closeAll(t, sub, sub, pub, pub)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case <-held.Context().Done():
	default:
		t.Error("the held message's context is not canceled after Close")
	}
	if _, open := <-ch; open {
		t.Error("channel open after Close")
	}
	if _, err := sub.Subscribe(context.Background(), topic); !errors.Is(err, kafka.ErrSubscriberClosed) {
		t.Errorf("Subscribe after Close: %v", err)
	}
	if err := pub.Publish(topic, sessionMessage("s-1", "y")); !errors.Is(err, kafka.ErrPublisherClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
}

// TestTopicLayout creates topics with the configured partitions, and refuses to
// publish to a missing topic when topic creation is off.
func TestTopicLayout(t *testing.T) {
	c := newCluster(t)
	named := uniqueName(t, "troupe.test.layout.")
	other := uniqueName(t, "troupe.test.layout.")
	layout := kafka.TopicLayout{
		InitializeTopics: true,
		Topics:           map[string]kafka.TopicConfig{named: {Partitions: 3, Configs: map[string]string{"retention.ms": "3600000"}}},
		Default:          kafka.TopicConfig{Partitions: 2},
	}
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Topics = layout })
	sub := c.subscriber(t, "", func(cfg *kafka.SubscriberConfig) { cfg.Topics = layout })
	defer closeAll(t, pub, sub)
	if err := pub.Publish(named, sessionMessage("s-1", "x")); err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize(other); err != nil {
		t.Fatal(err)
	}
	// A transport of its own: kafka-go's default one is shared in the process and
	// caches metadata for seconds, without the topics just created.
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(c.brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := client.Metadata(testContext(t, 30*time.Second), &kafkago.MetadataRequest{Topics: []string{named, other}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, tp := range md.Topics {
		got[tp.Name] = len(tp.Partitions)
	}
	if got[named] != 3 || got[other] != 2 {
		t.Errorf("partitions: %v; want %s: 3, %s: 2", got, named, other)
	}

	strict := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Topics = kafka.TopicLayout{}; cfg.PublishTimeout = time.Second })
	defer closeAll(t, strict)
	missing := uniqueName(t, "troupe.test.missing.")
	if err := strict.Publish(missing, sessionMessage("s-1", "x")); err == nil {
		t.Errorf("published to %s, which does not exist, with topic creation off", missing)
	}
}

// TestFromLatestSubscribe: without a group, FromLatest starts where each partition
// ended when Subscribe returned, so a message published right after Subscribe is
// received and one published before it is not. Twenty rounds on fresh topics, so
// that a start offset resolved later than Subscribe would show.
func TestFromLatestSubscribe(t *testing.T) {
	c := newCluster(t)
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, "", func(cfg *kafka.SubscriberConfig) { cfg.InitialOffset = kafka.FromLatest })
	defer closeAll(t, pub, sub)
	for round := range 20 {
		topic := uniqueName(t, "troupe.test.latest.")
		sid := fmt.Sprintf("s-%d", round)
		if err := pub.Publish(topic, sessionMessage(sid, "before")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		after := sessionMessage(sid, "after")
		if err := pub.Publish(topic, after); err != nil {
			cancel()
			t.Fatal(err)
		}
		got := receive(t, ch, 30*time.Second)
		got.Ack()
		cancel()
		if got.UUID != after.UUID {
			t.Fatalf("round %d: received %q first, want the message published after Subscribe", round, got.Payload)
		}
	}
}
