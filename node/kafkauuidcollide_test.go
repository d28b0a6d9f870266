package node_test

import (
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

// A header of the form "<session>/<seq>" names no event yet, but it is the ID
// the session records at that seq after its task: recorded as a task's, it took
// that ID, and the session's event there was refused at every attempt: the task
// ran to that event, its calls made, and its session stuck there with no result
// until a later task came. Here one is its own session's (seq 3, the model's
// answer), one another session's (seq 2) that has not started yet. Each goes to
// troupe.poison at once, saying why, and both sessions run their tasks.
func TestTaskWhoseMessageIDIsALaterEventsIDIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	own, victim := "uuid-own-"+stamp, "uuid-victim-"+stamp
	k.produce(t,
		kgo.Message{Key: []byte(own), Value: []byte(`{"input":"echo collides"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(own + "/3")}}},
		kgo.Message{Key: []byte(own), Value: []byte(`{"input":"echo other"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(victim + "/2")}}},
	)
	k.produce(t,
		kgo.Message{Key: []byte(victim), Value: []byte(`{"input":"echo victim","task_id":"victim"}`)},
		kgo.Message{Key: []byte(own), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	for session, task := range map[string]string{victim: "victim", own: "next"} {
		if res, ok := waitTaskResult(t, k, session, task, 45*time.Second); !ok || res.Status != messages.StatusCompleted {
			t.Fatalf("task %s: %+v (found %v), want it completed", task, res, ok)
		}
	}
	reasons := poisonReasons(t, k, own)
	if len(reasons) != 2 || !strings.Contains(reasons[0], own+"/3") || !strings.Contains(reasons[1], victim+"/2") ||
		!strings.Contains(reasons[0], "<session>/<seq>") {
		t.Errorf("poisoned with reasons %q; want one naming %s/3, then one naming %s/2", reasons, own, victim)
	}
	// Never run: its client is told it was rejected, under the ID it gave.
	for _, id := range []string{own + "/3", victim + "/2"} {
		if res, ok := waitTaskResult(t, k, own, id, time.Second); !ok || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected ||
			!strings.Contains(res.Error, "<session>/<seq>") {
			t.Errorf("the task whose ID is %s answered %+v (found %v); want it rejected, never run", id, res, ok)
		}
	}
}

// A header that is not UTF-8 named the task in the log by its bytes, and in its
// result, its events on the bus and its status (JSON) with U+FFFD in their place:
// an ID no client matching results, or cancelling the task by it, could find. The
// record goes to troupe.poison saying so, as one whose body is not UTF-8 does.
func TestTaskWhoseMessageIDIsNotUTF8IsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "uuid-utf8-" + time.Now().Format("150405.000000")
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo latin-1"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte("caf\xe9-1")}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	reasons := poisonReasons(t, k, session)
	if len(reasons) != 1 || !strings.Contains(reasons[0], "not valid UTF-8") {
		t.Errorf("poisoned with reasons %q; want one saying the ID is not valid UTF-8", reasons)
	}
}

// A header of 100 KB named the task in the log, its result and its status whole.
// One over node.MaxTaskMessageID goes to troupe.poison saying how long it is and
// what is allowed; one of that length runs.
func TestTaskWhoseMessageIDIsTooLongIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "uuid-long-" + time.Now().Format("150405.000000")
	longest := "id-" + strings.Repeat("x", node.MaxTaskMessageID-3)
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo huge"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(strings.Repeat("y", 100<<10))}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo longest"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(longest)}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	if res, ok := waitTaskResult(t, k, session, longest, 5*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("the task whose ID is %d bytes: %+v (found %v), want it completed", len(longest), res, ok)
	}
	reasons := poisonReasons(t, k, session)
	if len(reasons) != 1 || !strings.Contains(reasons[0], "102400 bytes long") || len(reasons[0]) > 2000 {
		t.Errorf("poisoned with reasons %.300q; want one saying the ID is 102400 bytes long, and short itself", reasons)
	}
}
