package node_test

import (
	"context"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A task whose reply_topic is troupe_results (Kafka treats '.' and '_' in topic
// names alike: troupe_results and troupe.results collide) is poisoned. It was
// taken: on a cluster
// whose troupe.results was not created yet, the reply topic was created in its
// place, and troupe.results could never be, so no result of any session reached
// it (on one where it was, the reply topic is refused and its result lost).
func TestReplyTopicThatCollidesWithTheResultsTopic(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "collide-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"one","reply_topic":"troupe_results"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"two"}`)}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "two", 20*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task two: %+v (found %v), want its result on troupe.results", res, ok)
	}
}
