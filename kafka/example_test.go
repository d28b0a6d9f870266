package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// A task keyed by its session goes through Kafka (here kfake, an in-process Kafka)
// to a member of the consumer group "nodes". Session s-9 lives on partition 0 of 3,
// as the Java client would place it.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	topics := kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: 3}}

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Topics: topics}, nil)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "nodes", Topics: topics}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	task := message.NewMessage("task-1", []byte(`{"input":"2+2"}`))
	task.Metadata.Set(messages.MetaSessionID, "s-9")
	if err := pub.Publish(messages.TopicTasks, task); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tasks, err := sub.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		panic(err)
	}
	select {
	case msg := <-tasks:
		rec, _ := kafka.Record(msg.Context())
		fmt.Printf("%s %s session %s, partition %d\n", msg.UUID, msg.Payload, msg.Metadata.Get(messages.MetaSessionID), rec.Partition)
		msg.Ack() // commits the offset for the group
	case <-ctx.Done():
		fmt.Println("no task")
	}
	// Output: task-1 {"input":"2+2"} session s-9, partition 0
}
