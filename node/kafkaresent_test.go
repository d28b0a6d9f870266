package node_test

import (
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A named task sent again after it was answered (its client lost the result,
// and reads troupe.results only from its end) is the same task, run once; its
// result was not published again, so that the client waited for ever. Its
// recorded result is published again, once for each record that sends it
// again, on troupe.results and on its reply topic.
func TestKafkaNamedTaskResentAfterItsResultGetsItAgain(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.node(t)
	session := "resent-" + time.Now().Format("150405.000000")
	reply := "resent.replies"
	task := kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo once","task_id":"t-1","reply_topic":"` + reply + `"}`)}
	sent := time.Now()
	k.produce(t, task)
	if r, ok := waitTaskResult(t, k, session, "t-1", 60*time.Second); !ok || r.Output != "once" {
		t.Fatalf("the task's result: %+v %v", r, ok)
	}
	waitCount := func(name string, want int) []messages.TaskResult {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := replyResults(t, k, name, session)
			if len(got) >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if got := waitCount(reply, 1); len(got) != 1 {
		t.Fatalf("results on the reply topic before the task is sent again: %+v", got)
	}
	k.produce(t, task)
	k.produce(t, task)
	for _, name := range []string{messages.TopicResults, reply} {
		got := waitCount(name, 3)
		if len(got) != 3 {
			t.Fatalf("results of the task on %s, sent three times: %d, want 3: %+v", name, len(got), got)
		}
		for _, r := range got {
			if r.TaskID != "t-1" || r.Status != messages.StatusCompleted || r.Output != "once" {
				t.Errorf("a result on %s: %+v", name, r)
			}
		}
	}
	// A record written before the task was recorded is the one that carried it,
	// read again (after a rebalance or a restart): its result was published as
	// the task ended, and nothing is published again. The resend behind it, on the
	// same partition, is answered.
	old := task
	old.Time = sent.Add(-time.Minute)
	k.produce(t, old, task)
	if got := waitCount(messages.TopicResults, 4); len(got) != 4 {
		t.Fatalf("results of the task sent four times and read again once: %d, want 4", len(got))
	}
	if c := countTasks(t, n, session); c != 1 {
		t.Fatalf("the task was recorded %d times, want once", c)
	}
	// No more than one for each record sent again.
	time.Sleep(time.Second)
	if got := replyResults(t, k, messages.TopicResults, session); len(got) != 4 {
		t.Fatalf("results of the task sent four times and read again once: %d, want 4", len(got))
	}
}
