package kafka_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/kafka"
)

// kafkaScript runs deploy/kafka.sh with args; the environment (TROUPE_DEPLOY_RUN,
// KAFKA_PORT, ...) is passed on, so it acts on the broker TROUPE_TEST_KAFKA names.
func kafkaScript(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join("..", "deploy", "kafka.sh")}, args...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/kafka.sh %v: %v\n%s", args, err, out)
	}
	t.Logf("deploy/kafka.sh %v took %s", args, time.Since(start).Round(time.Millisecond))
}

// TestBrokerRestart publishes continuously while the broker is stopped and
// started again, with a group member consuming throughout. Every message whose
// Publish returned nil must be in the topic afterwards and reach the consumer.
// It needs a real broker it may restart: TROUPE_TEST_KAFKA and
// TROUPE_TEST_KAFKA_CONTROL=1.
func TestBrokerRestart(t *testing.T) {
	if os.Getenv(envKafka) == "" || os.Getenv(envKafkaControl) != "1" {
		t.Skipf("needs a real broker the test may restart: set %s and %s=1", envKafka, envKafkaControl)
	}
	c := newCluster(t)
	topic := uniqueName(t, "troupe.test.restart.")
	ctx := testContext(t, 5*time.Minute)
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.PublishTimeout = 15 * time.Second })
	sub := c.subscriber(t, uniqueName(t, "g-"), nil)
	defer closeAll(t, pub, sub)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	received := map[string]bool{}
	go func() {
		for msg := range ch {
			mu.Lock()
			received[msg.UUID] = true
			mu.Unlock()
			msg.Ack()
		}
	}()

	// The publisher: one message at a time, round-robin over sessions, counting the
	// messages Publish confirmed and the calls that failed.
	var (
		pmu       sync.Mutex
		confirmed []string
		failures  int
	)
	confirmedCount := func() int { pmu.Lock(); defer pmu.Unlock(); return len(confirmed) }
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := sessionMessage(fmt.Sprintf("s-%d", i%8), fmt.Sprint(i))
			err := pub.Publish(topic, msg)
			pmu.Lock()
			if err == nil {
				confirmed = append(confirmed, msg.UUID)
			} else {
				failures++
			}
			pmu.Unlock()
			if err != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	waitFor("100 messages before the restart", func() bool { return confirmedCount() >= 100 })
	kafkaScript(ctx, t, "stop")
	before := confirmedCount()
	kafkaScript(ctx, t, "start")
	kafkaScript(ctx, t, "wait")
	waitFor("100 messages after the restart", func() bool { return confirmedCount() >= before+100 })
	close(stop)
	<-pubDone
	pmu.Lock()
	t.Logf("%d messages confirmed, %d publish calls failed", len(confirmed), failures)
	want := append([]string(nil), confirmed...)
	pmu.Unlock()

	waitFor("the consumer to receive every confirmed message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range want {
			if !received[id] {
				return false
			}
		}
		return true
	})

	// And the topic holds them: a new subscriber without a group reads them all.
	reader := c.subscriber(t, "", nil)
	defer closeAll(t, reader)
	all, err := reader.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, id := range want {
		missing[id] = true
	}
	for len(missing) > 0 {
		select {
		case msg := <-all:
			delete(missing, msg.UUID)
			msg.Ack()
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d confirmed messages are not in the topic", len(missing), len(want))
		}
	}
}
