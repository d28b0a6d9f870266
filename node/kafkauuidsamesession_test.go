package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A record whose _watermill_message_uuid header repeats the ID of an earlier task
// of the same session, with another task in it (a producer that reuses its
// request IDs), was taken for a redelivery of that task and dropped: no error,
// no poison record, no reply. It is refused now: on troupe.poison with a reason
// naming the ID. Its reply_topic gets nothing: a failed result there carried the
// task_id of the task that holds the ID, which ran, so a client matching results
// by task_id took that task for failed and its real result for a duplicate. The
// same record read again (the same task) is still a redelivery, run once and
// refused nowhere.
func TestTaskReusingASessionsTaskIDWithOtherContentIsRefused(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, id, replies := "uuid-same-"+stamp, "req-"+stamp, "client.replies"
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	uuid := []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(id)}}
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one"}`), Headers: uuid}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, id, 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task one: %+v (found %v), want it completed", res, ok)
	}
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one"}`), Headers: uuid}, // a redelivery
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","reply_topic":"` + replies + `"}`), Headers: uuid},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	var reasons []string
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) != session {
			return
		}
		for _, h := range m.Headers {
			if h.Key == "reason_poisoned" {
				reasons = append(reasons, string(h.Value))
			}
		}
		if got := header(m, node.RecordPoisonedKey); !strings.HasPrefix(got, "kafka:"+k.topic(messages.TopicTasks)+"/") {
			t.Errorf("poisoned copy's %s %q; want the record's position", node.RecordPoisonedKey, got)
		}
	})
	if len(reasons) != 1 || !strings.Contains(reasons[0], id) || !strings.Contains(reasons[0], "echo") && !strings.Contains(reasons[0], "differ") {
		t.Errorf("poisoned with reasons %q; want one, naming %s and saying the task differs", reasons, id)
	}
	// The refusal was published (if it was) before the record was poisoned, and
	// "next" was read after it.
	for _, m := range topicRecords(t, k, replies, session) {
		var res messages.TaskResult
		if json.Unmarshal(m.Value, &res) == nil {
			t.Errorf("a result on %s: %+v; want none (the refusal is on troupe.poison only)", replies, res)
		}
	}
}

// A record naming its task (task_id) sent again with another body is the same
// task, as over HTTP: its first body runs, and nothing is refused or poisoned.
// It was poisoned as a task reusing its session's task ID.
func TestNamedTaskSentAgainWithAnotherBodyIsTheSameTask(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, name := "named-again-"+stamp, "named-"+stamp
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"` + name + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, name, 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task %s: %+v (found %v), want it completed", name, res, ok)
	}
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"` + name + `"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) == session {
			t.Errorf("poisoned: %s", header(m, "reason_poisoned"))
		}
	})
}
