package node_test

import (
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
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
	k.produce(t, kgo.Message{Key: []byte(first), Value: []byte(`{"input":"echo one","task_id":"one"}`)})
	if res, ok := waitTaskResult(t, k, first, "one", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task one: %+v (found %v), want it completed", res, ok)
	}
	taken := first + "/2" // the first session's event at seq 2
	k.produce(t,
		kgo.Message{Key: []byte(second), Value: []byte(`{"input":"echo collides"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(taken)}}},
		kgo.Message{Key: []byte(second), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, second, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	reasons := poisonReasons(t, k, second)
	if len(reasons) != 1 || !strings.Contains(reasons[0], taken) {
		t.Errorf("poisoned with reasons %q; want one naming %s", reasons, taken)
	}
}
