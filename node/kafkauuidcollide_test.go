package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A record's _watermill_message_uuid header names its task (README): the ID of
// its task.submitted event. A producer's header that repeats the ID of an event
// of another session (its own request ID reused for another session once the
// node's memory of it is gone, or, as here, an event's ID) made the log refuse
// the task's append at every attempt: the session failed on it for ever, and its
// later tasks never ran. After three such refusals in a row it goes to
// troupe.poison, the log's refusal in the reason, and the session moves on.
func TestTaskWhoseMessageIDIsAnotherSessionsEventIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	first, second := "uuid-a-"+stamp, "uuid-b-"+stamp
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(first), Value: []byte(`{"input":"echo one","task_id":"one"}`)}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, first, "one", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task one: %+v (found %v), want it completed", res, ok)
	}
	taken := first + "/2" // the first session's event at seq 2
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(second), Value: []byte(`{"input":"echo collides"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(taken)}}},
		kgo.Message{Key: []byte(second), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, second, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	var reasons []string
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) != second {
			return
		}
		for _, h := range m.Headers {
			if h.Key == "reason_poisoned" {
				reasons = append(reasons, string(h.Value))
			}
		}
	})
	if len(reasons) != 1 || !strings.Contains(reasons[0], taken) {
		t.Errorf("poisoned with reasons %q; want one naming %s", reasons, taken)
	}
}
