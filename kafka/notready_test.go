package kafka_test

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// A broker that has just started refuses to create topics for a while
// (BROKER_NOT_AVAILABLE while a KRaft broker registers with its controller; seen
// with Kafka 4.1 started beside a node): the node's first publish and subscribe
// create their topics once it is ready, instead of failing (a node started with its
// broker exited with "Broker Not Available").
func TestCreateTopicWaitsForABrokerThatIsNotReady(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= 3 {
			return nil, nil, false // ready: the cluster creates it
		}
		c.KeepControl()
		refused.Add(1)
		req := r.(*kmsg.CreateTopicsRequest)
		res := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic = tp.Topic
			rt.ErrorCode = 8 // BROKER_NOT_AVAILABLE
			res.Topics = append(res.Topics, rt)
		}
		return res, nil, true
	})
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: c.ListenAddrs(),
		Topics:  kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: 2}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	if err := pub.Publish(messages.TopicTasks, sessionMessage("s-1", "x")); err != nil {
		t.Fatalf("publish to a broker that was not ready at first: %v", err)
	}
	if n := refused.Load(); n != 3 {
		t.Errorf("the broker refused %d creations, want 3 (then created the topic)", n)
	}
}
