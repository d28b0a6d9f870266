package node_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// brokers returns the real Kafka named by TROUPE_TEST_KAFKA, or an in-process kfake.
func brokers(t *testing.T) []string {
	t.Helper()
	if addr := os.Getenv("TROUPE_TEST_KAFKA"); addr != "" {
		return strings.Split(addr, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// kafkaNode runs a node on Kafka in a consumer group of its own. Troupe's topic names
// are fixed, so on a shared real broker a test sees records of earlier runs too: it
// matches results by its own, unique session ID.
func kafkaNode(t *testing.T, b []string) *node.Node {
	t.Helper()
	clients, err := kafka.DialNode(b, "troupe-test-"+strings.ReplaceAll(t.Name(), "/", "-")+time.Now().Format("150405.000000"),
		kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: 3}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	return nodetest.Start(t, node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live}})
}

// findRecord waits for a record with this key on a topic, reading every partition
// (the topic's partition count depends on the broker's setup).
func findRecord(t *testing.T, b []string, topic, key string) kgo.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		conn, err := kgo.DialContext(ctx, "tcp", b[0])
		if err != nil {
			t.Fatal(err)
		}
		parts, err := conn.ReadPartitions(topic)
		conn.Close()
		if err == nil {
			for _, p := range parts {
				r := kgo.NewReader(kgo.ReaderConfig{Brokers: b, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
				for {
					rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
					m, err := r.ReadMessage(rctx)
					rcancel()
					if err != nil {
						break
					}
					if string(m.Key) == key {
						r.Close()
						return m
					}
				}
				r.Close()
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no record keyed %s on %s", key, topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readResult(t *testing.T, b []string, session string) messages.TaskResult {
	t.Helper()
	m := findRecord(t, b, messages.TopicResults, session)
	var res messages.TaskResult
	if err := json.Unmarshal(m.Value, &res); err != nil {
		t.Fatalf("result %s: %v", m.Value, err)
	}
	return res
}

func TestKafkaIngressPlainJSONTaskToResult(t *testing.T) {
	b := brokers(t)
	kafkaNode(t, b)
	session := "kafka-" + time.Now().Format("150405.000000")
	w := &kgo.Writer{Addr: kgo.TCP(b...), Topic: messages.TopicTasks, Balancer: kafka.Balancer(), RequiredAcks: kgo.RequireAll}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A malformed task first: it must go to the poison topic and not block the next.
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input": "What is`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"What is 12 * (7 + 5)?","session_id":"` + session + `"}`)},
	); err != nil {
		t.Fatal(err)
	}
	res := readResult(t, b, session)
	if res.Status != messages.StatusCompleted || res.Output != "144" {
		t.Fatalf("result: %+v", res)
	}
	m := findRecord(t, b, node.TopicPoison, session)
	reason := ""
	for _, h := range m.Headers {
		if h.Key == "reason_poisoned" {
			reason = string(h.Value)
		}
	}
	if !strings.Contains(reason, "malformed JSON") {
		t.Fatalf("poison reason %q", reason)
	}
}

// kcat, the command-line client, publishes a task and reads its result.
func TestKcatPublishesATaskAndReadsTheResult(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (.ci/run installs it from Debian's kcat package)")
	}
	b := brokers(t)
	kafkaNode(t, b)
	session := "kcat-" + time.Now().Format("150405.000000")
	// -X partitioner=murmur2_random: the partitioner every Troupe producer uses.
	pub := exec.Command(kcat, "-b", strings.Join(b, ","), "-P", "-t", messages.TopicTasks, "-K", "|", "-X", "partitioner=murmur2_random")
	pub.Stdin = strings.NewReader(session + `|{"input":"What is 2^10?"}` + "\n")
	if out, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		cons := exec.CommandContext(ctx, kcat, "-b", strings.Join(b, ","), "-C", "-t", messages.TopicResults, "-o", "beginning", "-e", "-q", "-f", "%k|%s\n")
		out, err := cons.Output()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("kcat -C: %v", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, "|"); ok && k == session {
				var res messages.TaskResult
				if err := json.Unmarshal([]byte(v), &res); err != nil || res.Output != "1024" {
					t.Fatalf("result %q: %v", v, err)
				}
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// An oversized task is refused by the broker: the producer gets a clear error and
// nothing is half-accepted, and the partition keeps moving. (The node's own limit, 1 MiB
// of input, sits just under the broker's default record limit; over it a task that a
// broker with a larger limit lets through goes to the poison topic like any bad task:
// see TestBadBusMessagesArePoisonedAndDuplicatesSkipped and Task.Validate.)
func TestOversizedTasks(t *testing.T) {
	b := brokers(t)
	kafkaNode(t, b)
	session := "big-" + time.Now().Format("150405.000000")
	w := &kgo.Writer{Addr: kgo.TCP(b...), Topic: messages.TopicTasks, Balancer: kafka.Balancer(), RequiredAcks: kgo.RequireAll, BatchBytes: 8 << 20}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := `{"input":"` + strings.Repeat("x", 4<<20) + `"}`
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(huge)}); err == nil {
		t.Fatal("the broker accepted a 4 MiB record")
	} else if !strings.Contains(strings.ToLower(err.Error()), "too large") {
		t.Fatalf("unclear error for an oversized record: %v", err)
	}
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo still moving","session_id":"` + session + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, b, session); res.Output != "still moving" {
		t.Fatalf("result: %+v", res)
	}
}
