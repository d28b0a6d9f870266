package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// committedOffset returns the offset group committed for partition of topic (a
// Kafka name), -1 when none.
func (c cluster) committedOffset(t *testing.T, group, topic string, partition int) int64 {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(c.brokers...), Timeout: 10 * time.Second, Transport: tr}
	res, err := client.OffsetFetch(testContext(t, 30*time.Second), &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {partition}}})
	if err != nil {
		t.Fatalf("fetch committed offsets of %s: %v", group, err)
	}
	if res.Error != nil {
		t.Fatalf("fetch committed offsets of %s: %v", group, res.Error)
	}
	for _, p := range res.Topics[topic] {
		if p.Partition == partition {
			if p.Error != nil {
				t.Fatalf("committed offset of %s/%d: %v", topic, partition, p.Error)
			}
			return p.CommittedOffset
		}
	}
	return -1
}

// waitCommitted waits until group's committed offset of partition is want.
func (c cluster) waitCommitted(t *testing.T, group, topic string, partition int, want int64) {
	t.Helper()
	var got int64
	eventually(t, 30*time.Second, fmt.Sprintf("committed offset %d of %s/%d", want, topic, partition), func() bool {
		got = c.committedOffset(t, group, topic, partition)
		return got == want
	})
}

// receiveAll receives n messages and checks that they are want[from:from+n], in order.
func receiveAll(t *testing.T, ch <-chan *message.Message, want []string, from, n int) []*message.Message {
	t.Helper()
	got := make([]*message.Message, n)
	for i := range n {
		got[i] = receive(t, ch, 30*time.Second)
		if got[i].UUID != want[from+i] {
			t.Fatalf("message %d: got %q, want message %d", from+i, got[i].Payload, from+i)
		}
	}
	return got
}

// inFlight sets MaxInFlight.
func inFlight(n int) func(*kafka.SubscriberConfig) {
	return func(cfg *kafka.SubscriberConfig) { cfg.MaxInFlight = n }
}

// TestOutOfOrderAcksCommitTheContiguousPrefix: with MaxInFlight 3, three messages of
// a partition are out at once; acking the second and third does not move the
// window or the committed offset while the first is unacked; acking the first
// commits all three and lets three more out. The committed offset stops at the first
// unacked message, so the group's next member starts there and gets the acked
// message after it again.
func TestOutOfOrderAcksCommitTheContiguousPrefix(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	want := publishSessions(t, pub, topic, []string{"s-1"}, 6)["s-1"]
	p := kafka.Partition([]byte("s-1"), testPartitions)

	sub := c.subscriber(t, group, inFlight(3))
	ch, err := sub.Subscribe(testContext(t, 2*time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	first := receiveAll(t, ch, want, 0, 3)
	noMessage(t, ch, 300*time.Millisecond) // the window is full
	first[2].Ack()
	first[1].Ack()
	noMessage(t, ch, 300*time.Millisecond) // the window still starts at the first message
	if got := c.committedOffset(t, group, topic, p); got != -1 {
		t.Fatalf("committed offset %d while the first message is not acked", got)
	}
	first[0].Ack()
	c.waitCommitted(t, group, topic, p, 3)
	second := receiveAll(t, ch, want, 3, 3)
	second[2].Ack()
	second[0].Ack()
	c.waitCommitted(t, group, topic, p, 4)
	closeAll(t, sub) // flushes the commits; the fifth message is not acked
	if got := c.committedOffset(t, group, topic, p); got != 4 {
		t.Fatalf("after Close, committed offset %d, want 4 (the fifth message is not acked)", got)
	}

	next := c.subscriber(t, group, inFlight(3))
	defer closeAll(t, next)
	ch, err = next.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range receiveAll(t, ch, want, 4, 2) { // the sixth again: acked, but past the gap
		m.Ack()
	}
	c.waitCommitted(t, group, topic, p, 6)
}

// TestNackInTheWindow: a message nacked while later ones are out comes again before
// any message not delivered yet, and the committed offset waits for it.
func TestNackInTheWindow(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window-nack.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, group, inFlight(3))
	defer closeAll(t, pub, sub)
	want := publishSessions(t, pub, topic, []string{"s-1"}, 5)["s-1"]
	p := kafka.Partition([]byte("s-1"), testPartitions)
	ch, err := sub.Subscribe(testContext(t, 2*time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := receiveAll(t, ch, want, 0, 2) // the third is ready, not taken
	out[1].Nack()
	select { // the subscriber took the Nack in: it cancels the message's context
	case <-out[1].Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the nacked message's context is not canceled")
	}
	again := receive(t, ch, 30*time.Second)
	if again.UUID != want[1] {
		t.Fatalf("after the second message was nacked, got %q; want the second message again, before the third", again.Payload)
	}
	third := receiveAll(t, ch, want, 2, 1)[0]
	out[0].Ack()
	third.Ack()
	fourth := receiveAll(t, ch, want, 3, 1)[0] // the window: the second (out again), third and fourth
	noMessage(t, ch, 300*time.Millisecond)
	c.waitCommitted(t, group, topic, p, 1) // not 3: the second message is out again
	again.Ack()
	c.waitCommitted(t, group, topic, p, 3)
	fifth := receiveAll(t, ch, want, 4, 1)[0]
	fourth.Ack()
	fifth.Ack()
	c.waitCommitted(t, group, topic, p, 5)
}

// revocations signals each Revoked call of a member.
type revocations chan kafka.Assignment

func (revocations) Assigned(kafka.Assignment)    {}
func (r revocations) Revoked(a kafka.Assignment) { r <- a }

// TestRevokedMidFlightCommitsNothingPastTheGap: a member holds five messages of a
// partition and acks all but the third when a second member joins. The member
// giving the partition up commits the offset of the third message, not past it;
// the third's Ack after the revocation is not committed; and the partition's next
// owner delivers the third and everything after it again.
func TestRevokedMidFlightCommitsNothingPastTheGap(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window-revoke.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	want := publishSessions(t, pub, topic, []string{"s-1"}, 5)["s-1"]
	p := kafka.Partition([]byte("s-1"), testPartitions)
	ctx := testContext(t, 2*time.Minute)

	revoked := make(revocations, 16)
	member := func(cfg *kafka.SubscriberConfig) {
		cfg.MaxInFlight = 8
		cfg.RebalanceTimeout = 4 * time.Second // the handoff waits 2 s for the third message
		cfg.Rebalance = revoked
	}
	a := c.subscriber(t, group, member)
	defer closeAll(t, a)
	chA, err := a.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receiveAll(t, chA, want, 0, 5)
	for _, i := range []int{0, 1, 3, 4} {
		held[i].Ack()
	}
	c.waitCommitted(t, group, topic, p, 2)

	b := c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) { cfg.MaxInFlight = 8; cfg.RebalanceTimeout = 4 * time.Second })
	defer closeAll(t, b)
	chB, err := b.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-revoked:
	case <-ctx.Done():
		t.Fatal("the first member's partitions were never revoked")
	}
	if got := c.committedOffset(t, group, topic, p); got != 2 {
		t.Fatalf("after the revocation, committed offset %d, want 2 (the third message was not acked)", got)
	}
	select {
	case <-held[2].Context().Done():
	default:
		t.Error("the context of the message given up is not canceled")
	}
	held[2].Ack() // too late: the partition is given up

	// Whoever owns the partition now delivers the third message and those after it.
	merged := make(chan *message.Message)
	forward := func(ch <-chan *message.Message) {
		for m := range ch {
			select {
			case merged <- m:
			case <-ctx.Done():
				return
			}
		}
	}
	go forward(chA)
	go forward(chB)
	redelivered := receiveAll(t, merged, want, 2, 3)
	if got := c.committedOffset(t, group, topic, p); got != 2 {
		t.Fatalf("committed offset %d before the new owner acked anything, want 2: an Ack after the revocation was committed", got)
	}
	for _, m := range redelivered {
		m.Ack()
	}
	c.waitCommitted(t, group, topic, p, 5)
}

// TestWindowDeliversInOffsetOrder: with MaxInFlight 64 and a handler that acks in
// reverse order in batches, every message of each partition comes once, in offset
// order, and the group's offsets end at the partitions' ends.
func TestWindowDeliversInOffsetOrder(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window-order.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, group, inFlight(64))
	defer closeAll(t, pub, sub)
	sessions := []string{"s-1", "s-2", "s-3", "s-4"}
	const perSession = 50
	want := publishSessions(t, pub, topic, sessions, perSession)
	ch, err := sub.Subscribe(testContext(t, 2*time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	var batch []*message.Message
	for range len(sessions) * perSession {
		m := receive(t, ch, 30*time.Second)
		sid := m.Metadata.Get("session_id")
		got[sid] = append(got[sid], m.UUID)
		batch = append(batch, m)
		if len(batch) == 7 {
			for i := len(batch) - 1; i >= 0; i-- {
				batch[i].Ack()
			}
			batch = batch[:0]
		}
	}
	for _, m := range batch {
		m.Ack()
	}
	for _, sid := range sessions {
		if fmt.Sprint(got[sid]) != fmt.Sprint(want[sid]) {
			t.Errorf("session %s: delivered %v, want %v", sid, got[sid], want[sid])
		}
	}
	noMessage(t, ch, 300*time.Millisecond)
	ends := map[int]int64{}
	for _, sid := range sessions {
		ends[kafka.Partition([]byte(sid), testPartitions)] += perSession
	}
	for p, end := range ends {
		c.waitCommitted(t, group, topic, p, end)
	}
}

// TestHoldInFlightKeepsMessagesThroughARebalance: as
// TestRevokedMidFlightCommitsNothingPastTheGap, but the members hold messages in
// flight for up to 20 s (Subscriber.HoldInFlight) where their configuration alone
// waits 2 s (RebalanceTimeout 4 s): the member giving the partition up waits for
// the third message's Ack, which comes after those 2 s, commits it, and the
// partition's next owner delivers nothing of it again (its first message is one
// published afterwards). Without the hold, the third message was left to the next
// owner while its handler still held it, and handled twice.
func TestHoldInFlightKeepsMessagesThroughARebalance(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window-hold.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	want := publishSessions(t, pub, topic, []string{"s-1"}, 5)["s-1"]
	p := kafka.Partition([]byte("s-1"), testPartitions)
	ctx := testContext(t, 2*time.Minute)

	revoked := make(revocations, 16)
	member := func(l kafka.RebalanceListener) *kafka.Subscriber {
		s := c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) {
			cfg.MaxInFlight = 8
			cfg.RebalanceTimeout = 4 * time.Second
			cfg.Rebalance = l
		})
		s.HoldInFlight(20 * time.Second)
		return s
	}
	a := member(revoked)
	defer closeAll(t, a)
	chA, err := a.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receiveAll(t, chA, want, 0, 5)
	for _, i := range []int{0, 1, 3, 4} {
		held[i].Ack()
	}
	c.waitCommitted(t, group, topic, p, 2)

	b := member(nil)
	defer closeAll(t, b)
	chB, err := b.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// Past the 2 s the configuration alone waits (the rebalance is noticed within
	// a heartbeat, 300 ms), the message is still held: not given up.
	time.Sleep(3 * time.Second)
	select {
	case <-held[2].Context().Done():
		t.Fatal("the message held was given up before its handler acked it")
	case <-revoked:
		t.Fatal("the partition was revoked while a message of it was held")
	default:
	}
	held[2].Ack()
	select {
	case <-revoked:
	case <-ctx.Done():
		t.Fatal("the first member's partitions were never revoked")
	}
	if got := c.committedOffset(t, group, topic, p); got != 5 {
		t.Fatalf("after the revocation, committed offset %d, want 5 (every message acked)", got)
	}

	// Whoever owns the partition now delivers what comes next, nothing again.
	next := publishSessions(t, pub, topic, []string{"s-1"}, 1)["s-1"]
	merged := make(chan *message.Message)
	forward := func(ch <-chan *message.Message) {
		for m := range ch {
			select {
			case merged <- m:
			case <-ctx.Done():
				return
			}
		}
	}
	go forward(chA)
	go forward(chB)
	receiveAll(t, merged, next, 0, 1)[0].Ack()
	c.waitCommitted(t, group, topic, p, 6)
}

// TestMessageHandoffEndsWhenTheRebalanceBegins: a member holds three messages of a
// partition, for up to 20 s through a rebalance (Subscriber.HoldInFlight), when a
// second member joins. Their handoff contexts (Subscriber.MessageHandoff) end as
// the rebalance begins, while the messages are still held (their own contexts
// last): the handler acks the first, whose work it had begun, and nacks the two
// others, which it had not. The partition is given up at once, with the first
// message committed, and its next owner delivers the two others again.
func TestMessageHandoffEndsWhenTheRebalanceBegins(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.window-handoff.")
	group := uniqueName(t, "g-")
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	want := publishSessions(t, pub, topic, []string{"s-1"}, 3)["s-1"]
	p := kafka.Partition([]byte("s-1"), testPartitions)
	ctx := testContext(t, 2*time.Minute)

	revoked := make(revocations, 16)
	member := func(l kafka.RebalanceListener) *kafka.Subscriber {
		s := c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) {
			cfg.MaxInFlight = 8
			cfg.RebalanceTimeout = 4 * time.Second
			cfg.Rebalance = l
		})
		s.HoldInFlight(20 * time.Second)
		return s
	}
	a := member(revoked)
	defer closeAll(t, a)
	chA, err := a.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	held := receiveAll(t, chA, want, 0, 3)
	handoffs := make([]context.Context, len(held))
	for i, m := range held {
		h, ok := a.MessageHandoff(m)
		if !ok {
			t.Fatalf("message %d: no handoff context", i)
		}
		if h.Err() != nil {
			t.Fatalf("message %d: handoff begun before any rebalance", i)
		}
		handoffs[i] = h
	}

	b := member(nil)
	defer closeAll(t, b)
	chB, err := b.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range handoffs {
		select {
		case <-h.Done():
		case <-ctx.Done():
			t.Fatalf("message %d: the handoff never began", i)
		}
		if held[i].Context().Err() != nil {
			t.Fatalf("message %d: given up as its handoff began, while held", i)
		}
	}
	held[0].Ack()
	held[1].Nack()
	held[2].Nack()
	select {
	case <-revoked:
	case <-ctx.Done():
		t.Fatal("the first member's partitions were never revoked")
	}
	if got := c.committedOffset(t, group, topic, p); got != 1 {
		t.Fatalf("after the revocation, committed offset %d, want 1 (the first message acked)", got)
	}
	merged := make(chan *message.Message)
	forward := func(ch <-chan *message.Message) {
		for m := range ch {
			select {
			case merged <- m:
			case <-ctx.Done():
				return
			}
		}
	}
	go forward(chA)
	go forward(chB)
	for _, m := range receiveAll(t, merged, want, 1, 2) {
		m.Ack()
	}
	c.waitCommitted(t, group, topic, p, 3)
}
