//go:build review

package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The ID of a task record without a task_id and without Troupe's UUID header is
// its coordinates, kafka:<topic>/<partition>/<offset>. A topic deleted and created
// again (or a new Kafka cluster in front of the same log) starts its offsets at 0
// again: a new task of a session gets the ID of that session's first task, which
// the session has seen, and is dropped as a duplicate; a new session's gets the ID
// of another session's.
func TestTasksAfterTheTopicIsCreatedAgainRun(t *testing.T) {
	log := sharedLog(t)
	kA := newKafkaEnv(t)
	stamp := time.Now().Format("150405.000000")
	same, other := "again-"+stamp, ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("other-%s-%d", stamp, i); kafka.PartitionOf(id, 3) == kafka.PartitionOf(same, 3) {
			other = id
		}
	}
	first, third := "first-"+stamp, "third-"+stamp
	n1 := kA.nodeWith(t, node.Config{Log: log})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wA := kA.writer(t, messages.TopicTasks)
	if err := wA.WriteMessages(ctx, kgo.Message{Key: []byte(same), Value: []byte(`{"input":"echo ` + first + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, kA, same); res.Output != first {
		t.Fatalf("first result %+v", res)
	}
	wA.Close()
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}
	// The same topics on another cluster (or created again): offsets from 0.
	kB := kafkaEnv{brokers: brokers(t), prefix: kA.prefix}
	kB.nodeWith(t, node.Config{Log: log})
	wB := kB.writer(t, messages.TopicTasks)
	defer wB.Close()
	if err := wB.WriteMessages(ctx, kgo.Message{Key: []byte(same), Value: []byte(`{"input":"echo second"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := wB.WriteMessages(ctx, kgo.Message{Key: []byte(other), Value: []byte(`{"input":"echo ` + third + `"}`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var got map[string]messages.TaskResult
	for time.Now().Before(deadline) {
		got = topicResults(t, kB)
		if got[same].Output == "second" && got[other].Output == third {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Errorf("results on the new topic: %s %+v, %s %+v; want the second task of %s and the first of %s run", same, got[same], other, got[other], same, other)
	for _, s := range []string{same, other} {
		events, _ := log.Read(ctx, s, 1)
		for _, e := range events {
			t.Logf("%s: %d %s %s", s, e.Seq, e.Type, e.ID)
		}
	}
}
