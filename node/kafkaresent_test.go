package node_test

import (
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
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
	// A resend whose producer's clock is behind the node's, stamped before the
	// task was recorded, is a resend all the same, and is answered.
	behind := task
	behind.Time = sent.Add(-time.Minute)
	k.produce(t, behind)
	if got := waitCount(messages.TopicResults, 4); len(got) != 4 {
		t.Fatalf("results of the task sent four times, the last by a producer whose clock is behind: %d, want 4", len(got))
	}
	if c := countTasks(t, n, session); c != 1 {
		t.Fatalf("the task was recorded %d times, want once", c)
	}
	// No more than one for each record sent again.
	time.Sleep(time.Second)
	if got := replyResults(t, k, messages.TopicResults, session); len(got) != 4 {
		t.Fatalf("results of the task sent four times: %d, want 4", len(got))
	}
}

// The record that carried a named task, read again by a node that did not read it
// before (the partition's next owner after a rebalance, or its owner restarted
// after a kill -9, before the record's offset was committed), publishes nothing
// again, though its producer's clock, ahead of the nodes', stamped it after the
// task was recorded. A record is told
// from a resend by its ID, not by its time.
func TestKafkaNamedTaskRecordReadAgainPublishesNothingAgain(t *testing.T) {
	k := newKafkaEnv(t)
	log := sharedLog(t)
	first := k.nodeWith(t, node.Config{Log: log})
	session := "reread-" + time.Now().Format("150405.000000")
	ahead := kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo ahead","task_id":"t-ahead"}`), Time: time.Now().Add(10 * time.Minute)}
	k.produce(t, ahead)
	if r, ok := waitTaskResult(t, k, session, "t-ahead", 60*time.Second); !ok || r.Output != "ahead" {
		t.Fatalf("the task's result: %+v %v", r, ok)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Another node, of a consumer group of its own, reads the partition from its
	// start: the record again, then a task behind it.
	second := k.nodeWith(t, node.Config{Log: log})
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo behind","task_id":"t-behind"}`)})
	if r, ok := waitTaskResult(t, k, session, "t-behind", 60*time.Second); !ok || r.Output != "behind" {
		t.Fatalf("the task behind it: %+v %v", r, ok)
	}
	c := 0
	for _, r := range replyResults(t, k, messages.TopicResults, session) {
		if r.TaskID == "t-ahead" {
			c++
		}
	}
	if c != 1 {
		t.Fatalf("results of t-ahead, its record read again by another node: %d, want 1", c)
	}
	if n := countTasks(t, second, session); n != 2 {
		t.Fatalf("tasks recorded: %d, want 2", n)
	}
}
