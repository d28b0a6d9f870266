package node

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
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
	for _, topic := range []string{messages.TopicEvents, messages.TopicResults} {
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
	for _, topic := range []string{messages.TopicEvents, messages.TopicResults} {
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
	if err := o.Publish(messages.TopicEvents, message.NewMessage("late", nil)); !errors.Is(err, errOutboxClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
}

// gatedPublisher blocks every Publish until open is closed, then records it.
type gatedPublisher struct {
	open chan struct{}
	mu   sync.Mutex
	got  []string
}

func (p *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	<-p.open
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got = append(p.got, m.UUID)
	}
	return nil
}

func (p *gatedPublisher) Close() error { return nil }

// Flush reports true only once everything handed over before it is published:
// not while the broker does not take it (the time runs out), and not after the
// outbox gave a batch up at shutdown.
func TestOutboxFlush(t *testing.T) {
	pub := &gatedPublisher{open: make(chan struct{})}
	o := newOutbox(pub, 64, slog.New(slog.DiscardHandler), func() {})
	for i := range 10 {
		if err := o.Publish(messages.TopicResults, message.NewMessage(fmt.Sprintf("r-%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	if o.Flush(50 * time.Millisecond) {
		t.Fatal("Flush reported everything published while the broker took nothing")
	}
	close(pub.open)
	if !o.Flush(30 * time.Second) {
		t.Fatal("Flush timed out with the broker taking everything")
	}
	pub.mu.Lock()
	got := len(pub.got)
	pub.mu.Unlock()
	if got != 10 {
		t.Fatalf("Flush returned with %d of 10 messages published", got)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if !o.Flush(time.Second) {
		t.Error("Flush after a Close that published everything reported false")
	}

	// A broker that refuses everything: Close gives the batch up, and Flush says so.
	down := &flakyPublisher{got: map[string][]string{}}
	down.fail.Store(1 << 40)
	o = newOutbox(down, 64, slog.New(slog.DiscardHandler), func() {})
	o.retries = 1
	if err := o.Publish(messages.TopicResults, message.NewMessage("lost", nil)); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if o.Flush(time.Second) {
		t.Error("Flush reported everything published after Close gave a batch up")
	}
}
