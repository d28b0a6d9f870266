package node_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
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

// kafkaEnv is a test's Kafka: the brokers, and a topic prefix of the test's own
// (kafka.TopicLayout.Prefix), so that tests running at once against one real broker,
// or runs one after the other, never see each other's records.
type kafkaEnv struct {
	brokers []string
	prefix  string
}

func newKafkaEnv(t *testing.T) kafkaEnv {
	t.Helper()
	return kafkaEnv{brokers: brokers(t), prefix: uniqueTopicPrefix(t)}
}

// uniqueTopicPrefix returns a topic prefix no other test or run uses: "t", the time
// in nanoseconds, a random suffix and a dot.
func uniqueTopicPrefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("t%d%s.", time.Now().UnixNano(), hex.EncodeToString(b))
}

// topic returns the Kafka name of a Troupe topic, for clients other than the
// adapter (raw kafka-go, kcat).
func (k kafkaEnv) topic(name string) string { return k.prefix + name }

// layout is the topic layout of the test's adapter clients.
func (k kafkaEnv) layout(partitions int) kafka.TopicLayout {
	return kafka.TopicLayout{Prefix: k.prefix, InitializeTopics: true, Default: kafka.TopicConfig{Partitions: partitions}}
}

// node runs a node on Kafka, on the env's topics, in a consumer group of its own. It
// returns once the broker knows the node's tasks topic, so that other clients can
// write to it (a topic just created is not in every broker's metadata yet).
func (k kafkaEnv) node(t *testing.T) *node.Node {
	t.Helper()
	return k.nodeWith(t, node.Config{})
}

// nodeWith is node with a configuration of the test's (its Bus is set here).
func (k kafkaEnv) nodeWith(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	clients, err := kafka.DialNode(k.brokers, "troupe-test-"+strings.ReplaceAll(t.Name(), "/", "-")+time.Now().Format("150405.000000"),
		k.layout(3), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	var retention time.Duration
	if cfg.Bus != nil {
		retention = cfg.Bus.StoredRetention
	}
	cfg.Bus = &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live, StoredRetention: retention}
	n := nodetest.Start(t, cfg)
	k.waitTopic(t, messages.TopicTasks)
	return n
}

// writer returns a plain kafka-go producer to the Troupe topic name, with the
// partitioner every Troupe producer uses. It has a transport of its own: kafka-go's
// default transport is shared by the process and caches topic metadata for seconds,
// so it would not know a topic that an earlier test's writer did not see.
func (k kafkaEnv) writer(t *testing.T, name string) *kgo.Writer {
	tr := &kgo.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(name), Balancer: kafka.Balancer(), RequiredAcks: kgo.RequireAll, Transport: tr}
}

// waitTopic waits until the first broker knows the Troupe topic name (without the
// prefix) with all its partitions led.
func (k kafkaEnv) waitTopic(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := kgo.DialContext(ctx, "tcp", k.brokers[0])
		if err != nil {
			t.Fatal(err)
		}
		parts, err := conn.ReadPartitions(k.topic(name))
		conn.Close()
		led := err == nil && len(parts) > 0
		for _, p := range parts {
			led = led && p.Leader.Host != ""
		}
		if led {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("topic %s unknown to %s: %v", k.topic(name), k.brokers[0], err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produce writes recs to troupe.tasks in one call, within a minute, with a
// producer of its own (writer), failing the test on an error.
func (k kafkaEnv) produce(t *testing.T, recs ...kgo.Message) {
	t.Helper()
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

// poisonReasons returns the reasons (the header reason_poisoned) of the records
// on troupe.poison keyed by one of keys, in the order they are read.
func poisonReasons(t *testing.T, k kafkaEnv, keys ...string) []string {
	t.Helper()
	var reasons []string
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if !slices.Contains(keys, string(m.Key)) {
			return
		}
		for _, h := range m.Headers {
			if h.Key == "reason_poisoned" {
				reasons = append(reasons, string(h.Value))
			}
		}
	})
	return reasons
}

// findRecord waits for a record with this key on a Troupe topic (without the
// prefix), reading every partition (the topic's partition count depends on the
// broker's setup).
func findRecord(t *testing.T, k kafkaEnv, name, key string) kgo.Message {
	t.Helper()
	b, topic := k.brokers, k.topic(name)
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

func readResult(t *testing.T, k kafkaEnv, session string) messages.TaskResult {
	t.Helper()
	m := findRecord(t, k, messages.TopicResults, session)
	var res messages.TaskResult
	if err := json.Unmarshal(m.Value, &res); err != nil {
		t.Fatalf("result %s: %v", m.Value, err)
	}
	return res
}

func TestKafkaIngressPlainJSONTaskToResult(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "kafka-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
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
	res := readResult(t, k, session)
	if res.Status != messages.StatusCompleted || res.Output != "144" {
		t.Fatalf("result: %+v", res)
	}
	reason := header(findRecord(t, k, node.TopicPoison, session), "reason_poisoned")
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
	k := newKafkaEnv(t)
	k.node(t)
	session := "kcat-" + time.Now().Format("150405.000000")
	// -X partitioner=murmur2_random: the partitioner every Troupe producer uses.
	pub := exec.Command(kcat, "-b", strings.Join(k.brokers, ","), "-P", "-t", k.topic(messages.TopicTasks), "-K", "|", "-X", "partitioner=murmur2_random")
	pub.Stdin = strings.NewReader(session + `|{"input":"What is 2^10?"}` + "\n")
	if out, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		cons := exec.CommandContext(ctx, kcat, "-b", strings.Join(k.brokers, ","), "-C", "-t", k.topic(messages.TopicResults), "-o", "beginning", "-e", "-q", "-f", "%k|%s\n")
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
	k := newKafkaEnv(t)
	k.node(t)
	session := "big-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	w.BatchBytes = 8 << 20
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
	if res := readResult(t, k, session); res.Output != "still moving" {
		t.Fatalf("result: %+v", res)
	}
}

// A cancellation another Kafka client sends with its type header named Type (kcat
// -H Type=task.cancel: Kafka header names are case-sensitive) cancels the running
// task. Before, only a header named exactly "type" was read: the cancellation was
// read as a task, poisoned as one without input, and the task ran on.
func TestKafkaCancelWithATypeHeaderInAnotherCase(t *testing.T) {
	srv, model := heldProvider(t)
	k := newKafkaEnv(t)
	n := k.nodeWith(t, node.Config{Model: model})
	session := "type-case-" + time.Now().Format("150405.000000")
	if _, err := n.Submit(context.Background(), node.Task{Input: "think hard", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, 1)
	writeAll(t, k.writer(t, messages.TopicTasks), []kgo.Message{{Key: []byte(session),
		Value:   []byte(`{"v":1,"session_id":"` + session + `","reason":"stop from kcat"}`),
		Headers: []kgo.Header{{Key: "Type", Value: []byte(messages.TypeCancelRequested)}}}})
	waitFor(t, 30*time.Second, "session "+session+" cancelled", func() bool {
		st, ok, err := n.Status(context.Background(), session)
		return err == nil && ok && st.Status == messages.StatusFailed && strings.Contains(st.Error, "stop from kcat")
	})
	waitClosed(t, srv, "after the session recorded the cancellation")
}

// A task record whose tracing headers are repeated with different values (two
// tools each set b3 and traceparent; a proxy added its own) runs: the node decides
// nothing by them. Before, the record went to the poison topic and the task was lost.
func TestKafkaTaskRepeatingHeadersTheNodeDoesNotReadRuns(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "tracing-twice-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	h := func(k, v string) kgo.Header { return kgo.Header{Key: k, Value: []byte(v)} }
	writeAll(t, w, []kgo.Message{{Key: []byte(session), Value: []byte(`{"input":"What is 12 * (7 + 5)?","session_id":"` + session + `"}`),
		Headers: []kgo.Header{
			h("b3", "80f198ee56343ba8-e457b5a2e4d86bd1-1"), h("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
			h("b3", "0af7651916cd43dd-00f067aa0ba902b7-0"), h("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
			h("type", string(messages.TypeTaskSubmitted)), h("type", string(messages.TypeTaskSubmitted)),
		}}})
	if res := readResult(t, k, session); res.Status != messages.StatusCompleted || res.Output != "144" {
		t.Fatalf("result: %+v", res)
	}
}

// A record on the tasks topic that gives its type header two values (kcat -H
// type=task.submitted -H type=task.cancel) goes to the poison topic, its reason
// naming the header and both values, and changes nothing: its session runs on.
// Before, the last header won, unseen: the record cancelled the running session.
// One that repeats a header with the same value is read as it says.
func TestKafkaRecordGivingItsTypeTwoValuesIsPoisoned(t *testing.T) {
	srv, model := heldProvider(t)
	k := newKafkaEnv(t)
	n := k.nodeWith(t, node.Config{Model: model})
	session := "type-twice-" + time.Now().Format("150405.000000")
	if _, err := n.Submit(context.Background(), node.Task{Input: "think hard", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, 1)
	cancel := func(reason string, types ...string) kgo.Message {
		m := kgo.Message{Key: []byte(session), Value: []byte(`{"v":1,"session_id":"` + session + `","reason":"` + reason + `"}`)}
		for _, typ := range types {
			m.Headers = append(m.Headers, kgo.Header{Key: messages.MetaType, Value: []byte(typ)})
		}
		return m
	}
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	writeAll(t, w, []kgo.Message{cancel("stop from a confused producer", string(messages.TypeTaskSubmitted), string(messages.TypeCancelRequested))})
	defer func() {
		if t.Failed() {
			st, ok, err := n.Status(context.Background(), session)
			t.Logf("session %s: %+v, %v, %v", session, st, ok, err)
		}
	}()

	reason := header(findRecord(t, k, node.TopicPoison, session), "reason_poisoned")
	if want := `"type"="task.submitted", "type"="task.cancel"`; !strings.Contains(reason, want) {
		t.Fatalf("poison reason %q; want it to name %s", reason, want)
	}
	if st, ok, err := n.Status(context.Background(), session); err != nil || !ok || st.Status != messages.StatusRunning {
		t.Fatalf("session %s after the poisoned record: %+v, %v, %v; want it running", session, st, ok, err)
	}

	// The partition moved on: a cancellation whose type header is repeated with
	// the same value cancels the session.
	writeAll(t, w, []kgo.Message{cancel("stop from kcat", string(messages.TypeCancelRequested), string(messages.TypeCancelRequested))})
	waitFor(t, 30*time.Second, "session "+session+" cancelled", func() bool {
		st, ok, err := n.Status(context.Background(), session)
		return err == nil && ok && st.Status == messages.StatusFailed && strings.Contains(st.Error, "stop from kcat")
	})
	waitClosed(t, srv, "after the session recorded the cancellation")
}
