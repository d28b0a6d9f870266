package kafka_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
)

// TestPublishSaysTheBrokersCannotBeReached stops the broker under a publisher
// that wrote to a topic: the publish that follows fails saying that the brokers
// cannot be reached, naming them, where it said "fetch request error: topic not
// found (topic=…)" (kafka-go routed the produce by the metadata it had while the
// broker was gone), although the topic is there; Reachable says the same, and
// nil again once the broker is back. A topic that is missing on a broker that
// answers keeps its own error.
func TestPublishSaysTheBrokersCannotBeReached(t *testing.T) {
	if os.Getenv(envKafka) != "" {
		t.Skip("stops the broker, which only kfake lets a test do")
	}
	topic := uniqueName(t, "troupe.test.down.")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(testPartitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	addr := kc.ListenAddrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	c := cluster{brokers: []string{addr}}
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.PublishTimeout = 2 * time.Second
		cfg.Topics.InitializeTopics = false
	})
	defer closeAll(t, pub)
	ctx := testContext(t, time.Minute)
	if err := pub.Publish(topic, sessionMessage("s-1", "before")); err != nil {
		t.Fatal(err)
	}
	if err := pub.Reachable(ctx); err != nil {
		t.Fatalf("Reachable with the broker up: %v", err)
	}
	missing := uniqueName(t, "troupe.test.missing.")
	if err := pub.Publish(missing, sessionMessage("s-1", "nowhere")); err == nil || errors.Is(err, kafka.ErrBrokersUnreachable) ||
		strings.Contains(err.Error(), "cannot be reached") {
		t.Errorf("a publish to a missing topic on a broker that answers: %v; want the topic's error", err)
	}

	kc.Close()
	err = pub.Publish(topic, sessionMessage("s-1", "down"))
	if err == nil || !errors.Is(err, kafka.ErrBrokersUnreachable) || !strings.Contains(err.Error(), "the Kafka brokers at "+addr+" cannot be reached: ") ||
		strings.Contains(err.Error(), "topic not found") {
		t.Errorf("the first publish with the broker down: %v; want it to say that the brokers at %s cannot be reached", err, addr)
	}
	if err := pub.Reachable(ctx); !errors.Is(err, kafka.ErrBrokersUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Reachable with the broker down: %v; want ErrBrokersUnreachable naming %s", err, addr)
	}

	back, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(testPartitions, topic))
	if err != nil {
		t.Fatalf("restart kfake on port %d: %v", port, err)
	}
	defer back.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := pub.Reachable(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Reachable once the broker is back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReachableWithOneBrokerHanging lists first a broker that accepts
// connections but never answers (a broker that hangs, or an address whose
// packets are dropped), then one that works: the brokers can be reached, since
// one answers. Asked in turn within one second, the first took the whole second
// and the second was never asked, so that a node whose first broker hung was
// reported unready while it could publish.
func TestReachableWithOneBrokerHanging(t *testing.T) {
	if os.Getenv(envKafka) != "" {
		t.Skip("needs a broker of its own, which only kfake lets a test have")
	}
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		hung.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := cluster{brokers: []string{hung.Addr().String(), kc.ListenAddrs()[0]}}
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Topics.InitializeTopics = false })
	defer closeAll(t, pub)
	if err := pub.Reachable(testContext(t, time.Minute)); err != nil {
		t.Errorf("Reachable with one broker hanging and one answering: %v; want nil", err)
	}
}

// TestReachableWithASlowBroker puts a broker that answers, but only 700 ms after
// a connection's first request, behind a publisher that does not publish: once a
// check found it, Reachable asked within less time than the broker takes (as a
// health check asks, within half a second) keeps answering nil while the next
// check runs. It answered a timeout each time the outcome had aged and a new
// check began, so that /healthz turned over between 200 and 503 every second or
// so while the broker worked.
func TestReachableWithASlowBroker(t *testing.T) {
	if os.Getenv(envKafka) != "" {
		t.Skip("needs a broker of its own, which only kfake lets a test have")
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	slow := slowProxy(t, kc.ListenAddrs()[0], 700*time.Millisecond)
	pub := cluster{brokers: []string{slow}}.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Topics.InitializeTopics = false })
	defer closeAll(t, pub)
	if err := pub.Reachable(testContext(t, time.Minute)); err != nil {
		t.Fatalf("the first Reachable, waiting for the slow broker: %v", err)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ctx := testContext(t, 400*time.Millisecond)
		if err := pub.Reachable(ctx); err != nil {
			t.Fatalf("Reachable within 400 ms, the broker answering in 700 ms: %v; want nil, the last check's outcome", err)
		}
	}
}

// slowProxy forwards the connections it accepts to addr, holding back the
// first answer of each by delay; it returns its address.
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				buf := make([]byte, 64<<10)
				for first := true; ; first = false {
					n, err := s.Read(buf)
					if n > 0 {
						if first {
							time.Sleep(delay)
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestReachableAfterAProduceNewerThanTheCheck puts a broker that answers a
// connection's first request only after 2 s, longer than a check waits, behind
// a publisher: the check finds it unreachable, but a publish that waits longer
// goes through after it, and Reachable then answers nil, the newer outcome,
// until a check ends after it, also once the produce is older than a second. It
// answered the older check's error as soon as the produce was a second old, so
// that /healthz turned over with the node's traffic.
func TestReachableAfterAProduceNewerThanTheCheck(t *testing.T) {
	if os.Getenv(envKafka) != "" {
		t.Skip("needs a broker of its own, which only kfake lets a test have")
	}
	topic := uniqueName(t, "troupe.test.slow.")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(testPartitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	slow := slowProxy(t, kc.ListenAddrs()[0], 2*time.Second)
	pub := cluster{brokers: []string{slow}}.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.Topics.InitializeTopics = false
		cfg.PublishTimeout = 30 * time.Second
	})
	defer closeAll(t, pub)
	if err := pub.Reachable(testContext(t, time.Minute)); !errors.Is(err, kafka.ErrBrokersUnreachable) {
		t.Fatalf("Reachable, the broker answering after 2 s: %v; want ErrBrokersUnreachable (a check waits 1 s)", err)
	}
	if err := pub.Publish(topic, sessionMessage("s-1", "slow")); err != nil {
		t.Fatalf("a publish that waits for the slow broker: %v", err)
	}
	time.Sleep(1100 * time.Millisecond) // the produce is older than a second
	if err := pub.Reachable(testContext(t, 400*time.Millisecond)); err != nil {
		t.Errorf("Reachable after a produce that went through since the last check: %v; want nil", err)
	}
}
