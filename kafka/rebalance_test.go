package kafka_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
)

// rebalanceEvent is one call of a RebalanceListener, recorded when the call returns.
type rebalanceEvent struct {
	member  string
	revoked bool
	a       kafka.Assignment
}

func (e rebalanceEvent) String() string {
	call := "Assigned"
	if e.revoked {
		call = "Revoked"
	}
	return fmt.Sprintf("%s %s(gen %d, %v of %d)", e.member, call, e.a.Generation, e.a.Partitions, e.a.Total)
}

// rebalanceLog is one ordered log of the listener calls of several group members:
// the order of its events is the order in which the calls returned.
type rebalanceLog struct {
	mu     sync.Mutex
	events []rebalanceEvent
}

// memberListener records one member's calls in a rebalanceLog.
type memberListener struct {
	log  *rebalanceLog
	name string
	// assignedDelay and revokedDelay make the calls slow, so that work started
	// before Assigned returned, or after Revoked was called, would show in the log.
	assignedDelay, revokedDelay time.Duration
}

func (m memberListener) Assigned(a kafka.Assignment) {
	time.Sleep(m.assignedDelay)
	m.log.add(rebalanceEvent{member: m.name, a: a})
}

func (m memberListener) Revoked(a kafka.Assignment) {
	time.Sleep(m.revokedDelay)
	m.log.add(rebalanceEvent{member: m.name, revoked: true, a: a})
}

func (l *rebalanceLog) add(e rebalanceEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *rebalanceLog) snapshot() []rebalanceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// holding returns member's current assignment: its last event, if that is an
// Assigned.
func (l *rebalanceLog) holding(member string) (kafka.Assignment, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.events) - 1; i >= 0; i-- {
		if e := l.events[i]; e.member == member {
			return e.a, !e.revoked
		}
	}
	return kafka.Assignment{}, false
}

func (l *rebalanceLog) String() string {
	var b strings.Builder
	for i, e := range l.snapshot() {
		fmt.Fprintf(&b, "\n  %2d %s", i, e)
	}
	return b.String()
}

// check verifies the listener contract on the whole log: each member's calls
// alternate Assigned and Revoked of the same assignment, with growing generations;
// and a partition goes to a member only after its previous owner's Revoked returned.
func (l *rebalanceLog) check(t *testing.T, topic string, total int) {
	t.Helper()
	events := l.snapshot()
	last := map[string]int{} // member -> index of its last event
	for i, e := range events {
		if e.a.Topic != topic || e.a.Total != total || !slices.IsSorted(e.a.Partitions) {
			t.Errorf("event %d: %s: want topic %s, %d partitions in all, sorted", i, e, topic, total)
		}
		prev, seen := last[e.member]
		last[e.member] = i
		switch {
		case e.revoked && (!seen || events[prev].revoked):
			t.Errorf("event %d: %s without an Assigned before it", i, e)
		case e.revoked && !assignmentsEqual(events[prev].a, e.a):
			t.Errorf("event %d: %s revokes another assignment than %s", i, e, events[prev])
		case !e.revoked && seen && !events[prev].revoked:
			t.Errorf("event %d: %s while %s was not revoked", i, e, events[prev])
		case !e.revoked && seen && e.a.Generation <= events[prev].a.Generation:
			t.Errorf("event %d: %s does not follow generation %d", i, e, events[prev].a.Generation)
		}
		if e.revoked {
			continue
		}
		// Fencing: every partition's previous owner revoked it before this Assigned.
		for _, p := range e.a.Partitions {
			for j := i - 1; j >= 0; j-- {
				o := events[j]
				if o.member == e.member || !slices.Contains(o.a.Partitions, p) {
					continue
				}
				if !o.revoked {
					t.Errorf("event %d: %s gets partition %d, but %s (event %d) was not revoked before", i, e, p, o, j)
				}
				break // the other member's last event with p is a Revoked: p was free
			}
		}
	}
	if t.Failed() {
		t.Logf("rebalance log:%s", l)
	}
}

func assignmentsEqual(a, b kafka.Assignment) bool {
	return a.Topic == b.Topic && a.Generation == b.Generation && a.Total == b.Total && slices.Equal(a.Partitions, b.Partitions)
}

// eventually polls cond until it holds, or fails the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allPartitions returns 0..n-1.
func allPartitions(n int) []int {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// groupMember returns a subscriber in group whose listener records as name in log,
// on topics of the given partition count.
func (c cluster) groupMember(t *testing.T, group string, partitions int, l memberListener) *kafka.Subscriber {
	t.Helper()
	return c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) {
		cfg.Topics.Default.Partitions = partitions
		cfg.Rebalance = l
	})
}

// shareTheTopic waits until a and b hold assignments of one generation that
// together cover every partition, and checks that they are disjoint.
func shareTheTopic(t *testing.T, log *rebalanceLog, a, b string, partitions int) int32 {
	t.Helper()
	var gen int32
	eventually(t, time.Minute, fmt.Sprintf("%s and %s to share the topic", a, b), func() bool {
		aa, okA := log.holding(a)
		ab, okB := log.holding(b)
		gen = aa.Generation
		return okA && okB && aa.Generation == ab.Generation && len(aa.Partitions)+len(ab.Partitions) >= partitions
	})
	aa, _ := log.holding(a)
	ab, _ := log.holding(b)
	union := slices.Sorted(slices.Values(append(slices.Clone(aa.Partitions), ab.Partitions...)))
	if !slices.Equal(union, allPartitions(partitions)) {
		t.Errorf("generation %d: %s holds %v, %s holds %v: not disjoint, or not all %d partitions", gen, a, aa.Partitions, b, ab.Partitions, partitions)
	}
	if len(aa.Partitions) == 0 || len(ab.Partitions) == 0 {
		t.Errorf("generation %d: %s holds %v, %s holds %v: one has nothing", gen, a, aa.Partitions, b, ab.Partitions)
	}
	return gen
}

// TestRebalanceListenerOneMember: a single member is assigned every partition of
// the topic, and Close revokes that assignment before it returns.
func TestRebalanceListenerOneMember(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.listener.")
	log := &rebalanceLog{}
	sub := c.groupMember(t, uniqueName(t, "g-"), testPartitions, memberListener{log: log, name: "a"})
	ch, err := sub.Subscribe(testContext(t, 2*time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the first Assigned", func() bool { _, ok := log.holding("a"); return ok })
	a, _ := log.holding("a")
	if a.Topic != topic || a.Total != testPartitions || !slices.Equal(a.Partitions, allPartitions(testPartitions)) || a.Generation <= 0 {
		t.Errorf("Assigned %+v; want topic %s, partitions %v of %d, a positive generation", a, topic, allPartitions(testPartitions), testPartitions)
	}

	closeAll(t, sub)
	events := log.snapshot()
	if n := len(events); n < 2 || !events[n-1].revoked || !assignmentsEqual(events[n-1].a, events[n-2].a) {
		t.Errorf("after Close, the log does not end with the Revoked of the last Assigned:%s", log)
	}
	if _, open := <-ch; open {
		t.Error("channel open after Close")
	}
	log.check(t, topic, testPartitions)
}

// TestRebalanceListenerPartitionsAdded: when the topic gains partitions, the group
// rebalances and the new Assignment counts them in Total.
func TestRebalanceListenerPartitionsAdded(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.listener.")
	log := &rebalanceLog{}
	sub := c.groupMember(t, uniqueName(t, "g-"), testPartitions, memberListener{log: log, name: "a"})
	defer closeAll(t, sub)
	if _, err := sub.Subscribe(testContext(t, 2*time.Minute), topic); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the first Assigned", func() bool { _, ok := log.holding("a"); return ok })

	const grown = testPartitions + 2
	client := &kafkago.Client{Addr: kafkago.TCP(c.brokers...), Timeout: 10 * time.Second}
	res, err := client.CreatePartitions(testContext(t, 30*time.Second), &kafkago.CreatePartitionsRequest{
		Topics: []kafkago.TopicPartitionsConfig{{Name: topic, Count: grown}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	eventually(t, time.Minute, "an Assigned with the new partitions", func() bool {
		a, ok := log.holding("a")
		return ok && slices.Equal(a.Partitions, allPartitions(grown))
	})
	if a, _ := log.holding("a"); a.Total != grown {
		t.Errorf("Assigned %v of %d; want Total %d", a.Partitions, a.Total, grown)
	}
	closeAll(t, sub)
	events := log.snapshot()
	for i, e := range events {
		if e.a.Total != grown && slices.Contains(e.a.Partitions, grown-1) {
			t.Errorf("event %d: %s: a partition beyond Total", i, e)
		}
	}
}

// TestRebalanceListenerTwoMembers: two members of one group split a 6-partition
// topic; when the second one closes, the first is revoked and assigned all of it.
func TestRebalanceListenerTwoMembers(t *testing.T) {
	const partitions = 6
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.listener.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 3*time.Minute)
	log := &rebalanceLog{}
	subA := c.groupMember(t, group, partitions, memberListener{log: log, name: "a"})
	subB := c.groupMember(t, group, partitions, memberListener{log: log, name: "b"})
	defer closeAll(t, subA, subB)

	if _, err := subA.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a to hold every partition", func() bool {
		a, ok := log.holding("a")
		return ok && len(a.Partitions) == partitions
	})
	if _, err := subB.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	shared := shareTheTopic(t, log, "a", "b", partitions)

	closeAll(t, subB)
	if _, ok := log.holding("b"); ok {
		t.Errorf("b still holds partitions after its Close:%s", log)
	}
	eventually(t, time.Minute, "a to hold every partition again", func() bool {
		a, ok := log.holding("a")
		return ok && a.Generation > shared && slices.Equal(a.Partitions, allPartitions(partitions))
	})
	// a's shared assignment was revoked before the one with every partition.
	events := log.snapshot()
	revoked := slices.IndexFunc(events, func(e rebalanceEvent) bool { return e.member == "a" && e.revoked && e.a.Generation == shared })
	whole := slices.IndexFunc(events, func(e rebalanceEvent) bool {
		return e.member == "a" && !e.revoked && e.a.Generation > shared && len(e.a.Partitions) == partitions
	})
	if revoked < 0 || whole < revoked {
		t.Errorf("a's generation %d was not revoked before a held every partition again:%s", shared, log)
	}
	log.check(t, topic, partitions)
}

// TestRebalanceRevokedFencesNextOwner: a member that takes a while in Revoked keeps
// its partitions until Revoked returns; the member joining gets them only after.
func TestRebalanceRevokedFencesNextOwner(t *testing.T) {
	const partitions = 6
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.listener.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 3*time.Minute)
	log := &rebalanceLog{}
	// A second in Revoked: longer than a heartbeat interval, so that b would be
	// assigned meanwhile if the group did not wait for a, and well within the
	// session and rebalance timeouts.
	subA := c.groupMember(t, group, partitions, memberListener{log: log, name: "a", revokedDelay: time.Second})
	subB := c.groupMember(t, group, partitions, memberListener{log: log, name: "b"})
	defer closeAll(t, subA, subB)

	if _, err := subA.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a to hold every partition", func() bool {
		a, ok := log.holding("a")
		return ok && len(a.Partitions) == partitions
	})
	first, _ := log.holding("a")
	if _, err := subB.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	shareTheTopic(t, log, "a", "b", partitions)

	events := log.snapshot()
	revoked := slices.IndexFunc(events, func(e rebalanceEvent) bool {
		return e.member == "a" && e.revoked && assignmentsEqual(e.a, first)
	})
	assigned := slices.IndexFunc(events, func(e rebalanceEvent) bool { return e.member == "b" && !e.revoked && len(e.a.Partitions) > 0 })
	if revoked < 0 || assigned < revoked {
		t.Errorf("b was assigned a's partitions (event %d) before a's Revoked returned (event %d):%s", assigned, revoked, log)
	}
	log.check(t, topic, partitions)
}

// blockingListener is a memberListener whose first Revoked tells entered and
// waits until release is closed.
type blockingListener struct {
	memberListener
	entered chan<- kafka.Assignment // buffered
	release <-chan struct{}
	once    sync.Once
}

func (b *blockingListener) Revoked(a kafka.Assignment) {
	b.once.Do(func() {
		b.entered <- a
		<-b.release
	})
	b.memberListener.Revoked(a)
}

// TestRebalanceSlowRevokedKeepsTheMember: a member whose Revoked takes longer than
// SessionTimeout (a node handing its sessions over on a slow bus) is not evicted:
// the subscription heartbeats for it meanwhile, so the member joining gets none of
// its partitions before Revoked returned, and both share the topic in the next
// generation. Without those heartbeats, the coordinator evicts it after SessionTimeout
// and gives the other member every partition while Revoked still runs.
func TestRebalanceSlowRevokedKeepsTheMember(t *testing.T) {
	const partitions = 6
	session := 1500 * time.Millisecond
	if os.Getenv(envKafka) != "" {
		session = 6 * time.Second // the least a default broker accepts
	}
	// How long a's Revoked blocks: long enough that an evicted a would show.
	blocked := 4 * session
	c := newCluster(t, kfake.GroupMinSessionTimeout(session))
	topic := uniqueName(t, "troupe.test.listener.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 3*time.Minute)
	log := &rebalanceLog{}
	member := func(l kafka.RebalanceListener) *kafka.Subscriber {
		return c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) {
			cfg.Topics.Default.Partitions = partitions
			cfg.Rebalance = l
			cfg.HeartbeatInterval = 200 * time.Millisecond
			cfg.SessionTimeout = session
			cfg.RebalanceTimeout = blocked + 15*time.Second
		})
	}
	entered := make(chan kafka.Assignment, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	subA := member(&blockingListener{memberListener: memberListener{log: log, name: "a"}, entered: entered, release: release})
	subB := member(memberListener{log: log, name: "b"})
	defer closeAll(t, subA, subB)
	defer unblock() // before the Close of a, which waits for its Revoked

	if _, err := subA.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a to hold every partition", func() bool {
		a, ok := log.holding("a")
		return ok && len(a.Partitions) == partitions
	})
	first, _ := log.holding("a")
	if _, err := subB.Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-entered:
		if !assignmentsEqual(a, first) {
			t.Fatalf("a's Revoked of %+v; want %+v", a, first)
		}
	case <-ctx.Done():
		t.Fatal("a's Revoked was not called after b subscribed")
	}
	// While a's Revoked blocks, b must get nothing: a has not rejoined.
	since := time.Now()
	for time.Since(since) < blocked {
		if b, ok := log.holding("b"); ok && len(b.Partitions) > 0 {
			t.Fatalf("b was assigned %v (generation %d) while a's Revoked still ran: a was evicted:%s", b.Partitions, b.Generation, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	unblock()
	gen := shareTheTopic(t, log, "a", "b", partitions)
	if gen <= first.Generation {
		t.Errorf("a and b share generation %d, not one after a's %d", gen, first.Generation)
	}
	log.check(t, topic, partitions)
}

// TestRebalanceAssignedBeforeDelivery: every message a member receives is of a
// partition its last Assigned (which has returned) gave it, and whose Revoked has
// not been called, while a second member joins mid-stream.
func TestRebalanceAssignedBeforeDelivery(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.listener.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 3*time.Minute)
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	sessions := []string{"s-1", "s-2", "s-3", "s-4", "s-5", "s-6", "s-7", "s-8"}
	const perSession = 40
	publishSessions(t, pub, topic, sessions, perSession)
	want := len(sessions) * perSession

	log := &rebalanceLog{}
	// Slow Assigned calls: a consumer started before Assigned returned would
	// deliver meanwhile.
	subA := c.groupMember(t, group, testPartitions, memberListener{log: log, name: "a", assignedDelay: 200 * time.Millisecond})
	subB := c.groupMember(t, group, testPartitions, memberListener{log: log, name: "b", assignedDelay: 200 * time.Millisecond})
	defer closeAll(t, subA, subB)

	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		perMember = map[string]int{}
		problems  []string
	)
	done := make(chan struct{})
	consume := func(member string, ch <-chan *message.Message) {
		for msg := range ch {
			rec, ok := kafka.Record(msg.Context())
			a, holding := log.holding(member)
			mu.Lock()
			switch {
			case len(acked) == want:
				// A message delivered again after all were acked, maybe while the
				// subscribers close: the log may have moved on since it came.
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: message %s without record info", member, msg.UUID))
			case !holding || !slices.Contains(a.Partitions, rec.Partition):
				problems = append(problems, fmt.Sprintf("%s: message of partition %d (offset %d) delivered while holding %v (holding: %v)",
					member, rec.Partition, rec.Offset, a.Partitions, holding))
			}
			if !acked[msg.UUID] {
				acked[msg.UUID] = true
				perMember[member]++
				if len(acked) == want {
					close(done)
				}
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // slow enough for b to join mid-stream
			msg.Ack()
		}
	}
	chA, err := subA.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	go consume("a", chA)
	eventually(t, time.Minute, "a to consume 40 messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 40 })
	chB, err := subB.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	go consume("b", chB)
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("%d of %d messages acked before the deadline", len(acked), want)
	}
	closeAll(t, subA, subB)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("acked by a: %d, by b: %d", perMember["a"], perMember["b"])
	for _, p := range problems {
		t.Error(p)
	}
	if perMember["b"] == 0 {
		t.Error("b got no message: no rebalance happened while messages were in flight")
	}
	log.check(t, topic, testPartitions)
}

// TestRebalanceStickyKeepsTheSurvivorsPartitions: four members share a topic of
// twelve partitions; when one leaves, each of the others keeps every partition it
// held and only the leaver's move. (Range assignment, kafka-go's default, deals
// the partitions out again by member ID, and some survivor always loses some.)
func TestRebalanceStickyKeepsTheSurvivorsPartitions(t *testing.T) {
	const partitions = 12
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.sticky.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 3*time.Minute)
	log := &rebalanceLog{}
	names := []string{"a", "b", "c", "d"}
	subs := map[string]*kafka.Subscriber{}
	for _, name := range names {
		subs[name] = c.groupMember(t, group, partitions, memberListener{log: log, name: name})
	}
	defer func() {
		for _, s := range subs {
			closeAll(t, s)
		}
	}()
	for _, name := range names {
		if _, err := subs[name].Subscribe(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	// holdAll waits for one generation in which members hold every partition.
	holdAll := func(members []string, after int32) (int32, map[string][]int) {
		var gen int32
		held := map[string][]int{}
		eventually(t, time.Minute, fmt.Sprintf("%v to share the topic after generation %d", members, after), func() bool {
			clear(held)
			total := 0
			for i, m := range members {
				a, ok := log.holding(m)
				if !ok || a.Generation <= after || (i > 0 && a.Generation != gen) {
					return false
				}
				gen = a.Generation
				held[m] = a.Partitions
				total += len(a.Partitions)
			}
			return total == partitions
		})
		return gen, held
	}
	gen, before := holdAll(names, 0)
	for _, m := range names {
		if n := len(before[m]); n != 3 {
			t.Fatalf("generation %d: %s holds %d partitions, want 3 each: %v", gen, m, n, before)
		}
	}
	closeAll(t, subs["b"])
	delete(subs, "b")
	survivors := []string{"a", "c", "d"}
	_, after := holdAll(survivors, gen)
	for _, m := range survivors {
		for _, p := range before[m] {
			if !slices.Contains(after[m], p) {
				t.Errorf("%s held %v, then %v: it lost partition %d although only b left", m, before[m], after[m], p)
			}
		}
	}
	log.check(t, topic, partitions)
}
