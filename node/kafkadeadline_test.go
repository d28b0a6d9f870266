package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// countingModel answers every call at once and counts them.
type countingModel struct{ calls atomic.Int64 }

func (m *countingModel) Name() string { return "counting" }

func (m *countingModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "too late"}}, nil
}

// A task that a Kafka client produced with deadline_ms, read only after its
// deadline passed (the nodes were down, or behind), fails at once with reason
// deadline and makes no model call: its deadline counts from its submission (the
// record's time), not from when a node read it.
func TestKafkaTaskReadPastItsDeadlineFailsAtOnce(t *testing.T) {
	k := newKafkaEnv(t)
	model := &countingModel{}
	n := k.nodeWith(t, node.Config{Model: model})
	session := "kafka-late-" + time.Now().Format("150405.000000")
	k.produce(t, kgo.Message{Key: []byte(session), Time: time.Now().Add(-time.Hour),
		Value: []byte(`{"input":"What is 2 + 2?","session_id":"` + session + `","deadline_ms":60000}`)})
	events := waitEnded(t, n, session)
	last := events[len(events)-1]
	p, _ := last.Decode()
	if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonDeadline || model.calls.Load() != 0 {
		t.Fatalf("a task read an hour after it was sent with a 60 s deadline: %s %s, %d model calls; want it failed (deadline) with none\n%s",
			last.Type, last.Payload, model.calls.Load(), eventTypes(events))
	}
}

// The same for a task that a librdkafka client (kcat, confluent-kafka) put on a
// partition other than its session's, by CRC32 of its key: the cluster node that
// reads it forwards it to its session's partition, and the deadline still counts
// from the record the client wrote, not from the forward, which a node makes only
// when it reads the record (the nodes were down). Before, the forward was a record
// as new as the forward, and the task ran as if it had just been sent.
func TestForwardedKafkaTaskReadPastItsDeadlineFailsAtOnce(t *testing.T) {
	k := newKafkaEnv(t)
	model := &countingModel{}
	n, _ := clusterNode(t, k, uniqueGroup(t), sharedLog(t), "n1", 0, nil, model)
	waitFor(t, 60*time.Second, "the node owning every partition", func() bool { return n.PartitionsOwned() == forwardPartitions })
	sessions := misplacedSessions("kafka-late-fwd-"+time.Now().Format("150405.000000"), 2)
	session, timely := sessions[0], sessions[1]
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: &kgo.CRC32Balancer{},
		RequiredAcks: kgo.RequireAll, Transport: &kgo.Transport{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Time: time.Now().Add(-time.Hour),
		Value: []byte(`{"input":"What is 2 + 2?","deadline_ms":60000}`)},
		// Sent now with the same deadline: it runs, to its answer.
		kgo.Message{Key: []byte(timely), Value: []byte(`{"input":"What is 3 + 3?","deadline_ms":60000,"task_id":"timely"}`)}); err != nil {
		t.Fatal(err)
	}
	if events := waitEnded(t, n, timely); events[len(events)-1].Type != messages.TypeTaskCompleted || model.calls.Load() != 1 {
		t.Fatalf("a forwarded task read within its deadline: %d model calls, want 1\n%s", model.calls.Load(), eventTypes(events))
	}
	events := waitEnded(t, n, session)
	last := events[len(events)-1]
	p, _ := last.Decode()
	if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonDeadline || model.calls.Load() != 1 {
		t.Fatalf("a forwarded task read an hour after it was sent with a 60 s deadline: %s %s, %d model calls (1 the other task's); want it failed (deadline) with none\n%s",
			last.Type, last.Payload, model.calls.Load(), eventTypes(events))
	}
}
