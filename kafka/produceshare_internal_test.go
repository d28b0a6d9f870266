package kafka

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Publish calls made while another's produce is in flight go out together, in one
// produce request, and each returns once its own records are written: 1 + 39
// concurrent single-message calls take two produce requests, not 40.
func TestConcurrentPublishesShareOneProduce(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := NewPublisher(PublisherConfig{Brokers: c.ListenAddrs(),
		Topics: TopicLayout{InitializeTopics: true, Default: TopicConfig{Partitions: 4}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	const topic = "shared-produce"
	msg := func(i int) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata.Set("session_id", fmt.Sprintf("s%d", i))
		return m
	}
	if err := p.Publish(topic, msg(-1)); err != nil { // the topic exists and is known
		t.Fatal(err)
	}

	var produces atomic.Int32
	held := make(chan struct{})
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if produces.Add(1) == 1 {
			close(held)
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	const calls = 40
	errs := make([]error, calls)
	var wg sync.WaitGroup
	publish := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Publish(topic, msg(i))
		}()
	}
	publish(0)
	<-held // call 0's produce is in flight
	for i := 1; i < calls; i++ {
		publish(i)
	}
	wire, _ := p.cfg.Topics.wire(topic)
	v, _ := p.queues.Load(wire)
	q, _ := v.(*produceQueue)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n := 0
		if q != nil {
			q.mu.Lock()
			n = len(q.pending)
			q.mu.Unlock()
		}
		if n == calls-1 {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			wg.Wait()
			t.Fatalf("%d calls queued behind the produce in flight, want %d; %d produce requests for %d calls", n, calls-1, produces.Load(), calls)
		}
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n := produces.Load(); n != 2 {
		t.Fatalf("%d produce requests for %d concurrent calls, want 2", n, calls)
	}
}
