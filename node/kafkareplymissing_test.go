package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// On a broker that creates no topics (kfake's default, a cluster's usual
// setting) a reply_topic that does not exist is refused with
// UNKNOWN_TOPIC_OR_PARTITION, which kafka-go calls temporary: the node's outbox
// retried it for ever, and the results of every later task waited behind it.
// They flow now, and the bad reply topic is given up after its retries.
func TestMissingReplyTopicHoldsNoOtherResult(t *testing.T) {
	k := newKafkaEnv(t)
	own := []string{messages.TopicTasks, messages.TopicEvents, messages.TopicResults, messages.TopicToolRequests,
		messages.TopicModelRequests, messages.TopicReplies, messages.TopicEffectCancels, messages.TopicDeltas, node.TopicPoison, "good.replies"}
	conn, err := kgo.Dial("tcp", k.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	var configs []kgo.TopicConfig
	for _, name := range own {
		configs = append(configs, kgo.TopicConfig{Topic: k.topic(name), NumPartitions: 3, ReplicationFactor: 1})
	}
	if err := conn.CreateTopics(configs...); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	layout := k.layout(3)
	layout.InitializeTopics = false
	clients, err := kafka.DialNode(k.brokers, "troupe-test-"+time.Now().Format("150405.000000"), layout, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	n, err := node.New(context.Background(), node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	session := "missing-reply-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"one","reply_topic":"missing.replies"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "one", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task one: %+v (found %v), want it completed", res, ok)
	}
	// The next task's result comes in a later batch of the outbox.
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"two","reply_topic":"good.replies"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "two", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task two: %+v (found %v), want it completed past the missing reply topic", res, ok)
	}
	var replies []string
	for _, m := range topicRecords(t, k, "good.replies", session) {
		var res messages.TaskResult
		if json.Unmarshal(m.Value, &res) == nil {
			replies = append(replies, res.TaskID)
		}
	}
	if strings.Join(replies, ",") != "two" {
		t.Errorf("good.replies holds %v; want two's result", replies)
	}
}
