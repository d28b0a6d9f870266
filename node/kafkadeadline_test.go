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
