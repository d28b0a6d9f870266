package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// TestBrokerRestartTasks restarts the real Kafka broker while a Kafka client keeps
// publishing tasks to a cluster node: every task whose publish the broker
// acknowledged completes, its result reaches troupe.results, and its tool side effect
// happens once. It needs a broker it may restart: TROUPE_TEST_KAFKA and
// TROUPE_TEST_KAFKA_CONTROL=1 (.ci/run runs it among the fault tests).
func TestBrokerRestartTasks(t *testing.T) {
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_KAFKA_CONTROL") != "1" {
		t.Skip("needs a real broker the test may restart: set TROUPE_TEST_KAFKA and TROUPE_TEST_KAFKA_CONTROL=1")
	}
	c := newTestCluster(t, 0)
	k, led, calls := c.k, c.led, c.calls
	n, _ := c.node("n1", 0)
	waitFor(t, 60*time.Second, "the node owns partitions", func() bool { return n.PartitionsOwned() > 0 })

	// A Kafka client: publishes plain JSON tasks and reads results.
	layout := k.layout(6)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: k.brokers, Topics: layout, PublishTimeout: 20 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: k.brokers, InitialOffset: kafka.FromLatest, Topics: layout}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := sub.Subscribe(ctx, messages.TopicResults)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]messages.TaskResult{}
	go func() {
		for m := range results {
			var r messages.TaskResult
			if json.Unmarshal(m.Payload, &r) == nil {
				mu.Lock()
				got[r.SessionID] = r
				mu.Unlock()
			}
			m.Ack()
		}
	}()

	var accepted []string
	var refused atomic.Int64
	publish := func(i int) {
		id := fmt.Sprintf("restart-%d-%03d", time.Now().UnixNano(), i)
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"input":"pay 7","session_id":"`+id+`"}`))
		msg.Metadata.Set(messages.MetaSessionID, id)
		if err := pub.Publish(messages.TopicTasks, msg); err != nil {
			refused.Add(1) // the client knows: not accepted, not expected
			return
		}
		accepted = append(accepted, id)
	}
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(2 * time.Second)
		kafkaCtl(t, "stop")
		time.Sleep(3 * time.Second)
		kafkaCtl(t, "start")
		kafkaCtl(t, "wait")
	}()
	for i := 0; ; i++ {
		publish(i)
		select {
		case <-restarted:
		default:
			time.Sleep(20 * time.Millisecond)
			continue
		}
		break
	}
	for i := range 20 { // and some after the restart
		publish(100000 + i)
	}
	t.Logf("tasks accepted by the broker: %d, refused (client saw the error): %d", len(accepted), refused.Load())

	deadline := time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		missing := 0
		for _, id := range accepted {
			if r, ok := got[id]; !ok || r.Status != messages.StatusCompleted {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted tasks have no completed result on troupe.results", missing, len(accepted))
		}
		time.Sleep(200 * time.Millisecond)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	for key, c := range led.effects {
		if c != 1 {
			t.Errorf("side effect %s happened %d times", key, c)
		}
	}
	// Every accepted task paid once. A publish the client saw fail may still have
	// reached the broker (it crashed after writing, before answering): such a task
	// runs too, once, and is neither lost nor expected.
	paid := map[string]int{}
	for key := range led.effects {
		paid[strings.SplitN(key, "/", 2)[0]]++
	}
	for _, id := range accepted {
		if paid[id] != 1 {
			t.Errorf("accepted task %s paid %d times", id, paid[id])
		}
	}
	if extra := len(paid) - len(accepted); extra < 0 || extra > int(refused.Load()) {
		t.Errorf("%d side effects for %d accepted tasks and %d refused", len(led.effects), len(accepted), refused.Load())
	}
	if len(led.violations) > 0 || len(calls.violations) > 0 {
		t.Errorf("recorded effects repeated: %v %v", led.violations, calls.violations)
	}
	t.Logf("all %d accepted tasks completed with a result on troupe.results; side effects %d, duplicates 0", len(accepted), len(led.effects))
}

// kafkaCtl runs deploy/kafka.sh on the broker TROUPE_TEST_KAFKA names.
func kafkaCtl(t *testing.T, arg string) {
	start := time.Now()
	out, err := exec.Command("bash", filepath.Join("..", "deploy", "kafka.sh"), arg).CombinedOutput()
	if err != nil {
		t.Errorf("deploy/kafka.sh %s: %v\n%s", arg, err, out)
		return
	}
	t.Logf("deploy/kafka.sh %s took %s", arg, time.Since(start).Round(time.Millisecond))
}
