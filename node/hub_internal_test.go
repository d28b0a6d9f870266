package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// A watcher that reads late gets every event in order (its channel is small, the
// backlog behind it holds the rest); one that falls further behind than the backlog
// is disconnected; neither blocks delivery.
func TestHubBacklogAndDisconnect(t *testing.T) {
	h := newHub(nil, nil)
	slow, stopSlow := h.subscribe("s")
	defer stopSlow()
	stuck, stopStuck := h.subscribe("s")
	defer stopStuck()
	const n = watcherBuffer + watcherBacklog/2
	for i := range n {
		h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: uint64(i + 1)}})
	}
	for i := range n {
		select {
		case e, ok := <-slow:
			if !ok || e.Seq != uint64(i+1) {
				t.Fatalf("event %d: got seq %d (open %v)", i+1, e.Seq, ok)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d never came", i+1)
		}
	}
	// stuck has read nothing: past its channel and backlog it is disconnected.
	for i := range watcherBacklog {
		h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: uint64(n + i + 1)}})
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-stuck:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watcher that fell behind was not disconnected")
		}
	}
}

// countingSubscriber counts the subscriptions to messages.TopicEvents, and those
// still open.
type countingSubscriber struct {
	message.Subscriber
	started, open atomic.Int64
}

func (s *countingSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ch, err := s.Subscriber.Subscribe(ctx, topic)
	if err == nil && topic == messages.TopicEvents {
		s.started.Add(1)
		s.open.Add(1)
		go func() { <-ctx.Done(); s.open.Add(-1) }()
	}
	return ch, err
}

// publishEvent publishes an event on messages.TopicEvents as the outbox does.
func publishEvent(t *testing.T, pub message.Publisher, e messages.Envelope) {
	t.Helper()
	e.ID, e.Type, e.Payload = fmt.Sprintf("%s-%d", e.SessionID, e.Seq), messages.TypeTaskSubmitted, []byte(`{}`)
	b, err := messages.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaSessionID, e.SessionID)
	if err := pub.Publish(messages.TopicEvents, msg); err != nil {
		t.Fatal(err)
	}
}

func nextSeq(t *testing.T, ch <-chan messages.Envelope) uint64 {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("the watcher was disconnected")
		}
		return e.Seq
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return 0
}

func expectClosed(t *testing.T, ch <-chan messages.Envelope) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watcher was not disconnected")
		}
	}
}

// On a shared bus, a watcher of a session the node runs takes its events from the
// session actor and the hub does not read messages.TopicEvents; a watcher of a
// session the node does not run reads them from the bus, through a subscription the
// hub holds while such watchers exist (and a little longer). Each watcher has one
// source, so none gets an event twice. Losing the session disconnects its local
// watchers, which watch again on the bus.
func TestHubReadsTheBusOnlyForRemoteWatchers(t *testing.T) {
	bus := NewEmbeddedBus(watermill.NopLogger{})
	defer bus.Close()
	sub := &countingSubscriber{Subscriber: bus}
	var local atomic.Bool
	local.Store(true)
	h := newHub(sub, func(string) bool { return local.Load() })
	h.bus.linger = 10 * time.Millisecond
	defer h.close()

	mine, stopMine := h.subscribe("s")
	defer stopMine()
	h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: 1}})
	if seq := nextSeq(t, mine); seq != 1 {
		t.Fatalf("local watcher got seq %d, want 1", seq)
	}
	if n := sub.started.Load(); n != 0 {
		t.Fatalf("the hub subscribed to %s %d times with only local watchers", messages.TopicEvents, n)
	}

	// The partition moves: the local watcher is disconnected, and watches on the bus.
	local.Store(false)
	h.revoked()
	expectClosed(t, mine)
	theirs, stopTheirs := h.subscribe("s")
	if n := sub.started.Load(); n != 1 {
		t.Fatalf("%d subscriptions to %s for a remote watcher, want 1", n, messages.TopicEvents)
	}
	other, stopOther := h.subscribe("s") // shares the subscription
	if n := sub.started.Load(); n != 1 {
		t.Fatalf("%d subscriptions to %s for two remote watchers, want 1", n, messages.TopicEvents)
	}
	h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: 2}}) // not for remote watchers
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 3})
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 4})
	// A new owner publishes the session's latest task again (what its previous
	// owner may not have published): the watchers skip what they had.
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 3})
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 4})
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 5})
	for _, w := range []<-chan messages.Envelope{theirs, other} {
		for _, want := range []uint64{3, 4, 5} {
			if seq := nextSeq(t, w); seq != want {
				t.Fatalf("remote watcher got seq %d, want %d", seq, want)
			}
		}
	}

	// The last remote watcher leaves: the subscription ends after the linger, and the
	// next remote watcher subscribes again.
	stopTheirs()
	stopOther()
	waitUntil(t, func() bool { return sub.open.Load() == 0 })
	again, stopAgain := h.subscribe("s")
	defer stopAgain()
	if n := sub.started.Load(); n != 2 {
		t.Fatalf("%d subscriptions to %s, want 2", n, messages.TopicEvents)
	}
	publishEvent(t, bus, messages.Envelope{SessionID: "s", Seq: 6})
	if seq := nextSeq(t, again); seq != 6 {
		t.Fatalf("remote watcher got seq %d, want 6", seq)
	}
	h.close()
	expectClosed(t, again)
	waitUntil(t, func() bool { return sub.open.Load() == 0 })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A watcher without deltas falls behind past watcherBehind unread events, however
// its channel and its backlog share them: it keeps 264, and the 265th disconnects it.
func TestHubWatcherFallsBehindPastWatcherBehind(t *testing.T) {
	h := newHub(nil, nil)
	w, stop := h.subscribe("s")
	defer stop()
	connected := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.subs["s"]) == 1
	}
	for i := range watcherBehind {
		h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: uint64(i + 1)}})
	}
	if !connected() {
		t.Fatalf("disconnected with %d unread events", watcherBehind)
	}
	h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: watcherBehind + 1}})
	if connected() {
		t.Fatalf("still connected with %d unread events", watcherBehind+1)
	}
	for i := 0; ; i++ {
		select {
		case e, ok := <-w:
			if !ok {
				return
			}
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d: got seq %d", i+1, e.Seq)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the channel of the watcher that fell behind never closed")
		}
	}
}

// wantsDeltas answers from the count of watchers of deltas while there are none,
// and looks the session's watchers up while there are: the count follows every
// watcher of deltas added and dropped (unsubscribed, fallen behind, the hub closed).
func TestHubWantsDeltasFollowsItsWatchers(t *testing.T) {
	h := newHub(nil, nil)
	_, stopPlain := h.subscribe("s")
	if h.wantsDeltas("s") || h.deltaWatchers.Load() != 0 {
		t.Fatalf("a plain watcher: wantsDeltas %v, count %d", h.wantsDeltas("s"), h.deltaWatchers.Load())
	}
	_, stopA := h.watch("s", true)
	_, stopB := h.watch("t", true)
	if !h.wantsDeltas("s") || !h.wantsDeltas("t") || h.wantsDeltas("u") || h.deltaWatchers.Load() != 2 {
		t.Fatalf("two watchers of deltas: s %v, t %v, u %v, count %d", h.wantsDeltas("s"), h.wantsDeltas("t"), h.wantsDeltas("u"), h.deltaWatchers.Load())
	}
	stopA()
	stopA() // twice: counted once
	if h.wantsDeltas("s") || !h.wantsDeltas("t") || h.deltaWatchers.Load() != 1 {
		t.Fatalf("after s's stop: s %v, t %v, count %d", h.wantsDeltas("s"), h.wantsDeltas("t"), h.deltaWatchers.Load())
	}
	h.close()
	stopB()
	stopPlain()
	if h.wantsDeltas("t") || h.deltaWatchers.Load() != 0 {
		t.Fatalf("after close: t %v, count %d", h.wantsDeltas("t"), h.deltaWatchers.Load())
	}
}
