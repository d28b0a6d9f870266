package node

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// flakyPublisher refuses the first `fail` Publish calls (a broker outage), then
// records what it is given, by topic.
type flakyPublisher struct {
	fail  atomic.Int64
	mu    sync.Mutex
	got   map[string][]string
	calls int
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.fail.Add(-1) >= 0 {
		return errors.New("broker down")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	for _, m := range msgs {
		p.got[topic] = append(p.got[topic], m.UUID)
	}
	return nil
}

func (p *flakyPublisher) Close() error { return nil }

// The outbox keeps each topic's order, rides out an outage without dropping
// anything, and publishes everything queued before Close returns.
func TestOutboxKeepsOrderThroughAnOutage(t *testing.T) {
	pub := &flakyPublisher{got: map[string][]string{}}
	pub.fail.Store(3)
	failures := atomic.Int64{}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() { failures.Add(1) })
	o.retries = 2
	const n = 500
	var wg sync.WaitGroup
	for _, topic := range []string{"events", "results"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := o.Publish(topic, message.NewMessage(fmt.Sprintf("%s-%04d", topic, i), nil)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"events", "results"} {
		got := pub.got[topic]
		if len(got) != n {
			t.Fatalf("%s: %d messages published, want %d", topic, len(got), n)
		}
		for i, id := range got {
			if want := fmt.Sprintf("%s-%04d", topic, i); id != want {
				t.Fatalf("%s: message %d is %s, want %s", topic, i, id, want)
			}
		}
	}
	if pub.calls >= 2*n {
		t.Errorf("%d Publish calls for %d messages: nothing was batched", pub.calls, 2*n)
	}
	if failures.Load() == 0 {
		t.Error("the outage was not counted")
	}
	if err := o.Publish("events", message.NewMessage("late", nil)); !errors.Is(err, errOutboxClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
}
