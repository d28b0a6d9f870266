package node_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// taskCountingPublisher is a Kafka publisher that counts the tasks published
// through it (task.submitted on messages.TopicTasks); it is a kafka.Publisher
// otherwise, Reachable included.
type taskCountingPublisher struct {
	*kafka.Publisher
	tasks atomic.Int32
}

func (p *taskCountingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if topic == messages.TopicTasks && m.Metadata.Get(messages.MetaType) == string(messages.TypeTaskSubmitted) {
			p.tasks.Add(1)
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestTaskRefusedAtOnceWhileTheBrokersAreKnownUnreachable: once a node on
// Kafka knows its brokers cannot be reached (its /healthz answers 503 saying
// so), a task posted to it is refused with the same reason without being
// published: the publish would only wait out the producer's retries (about
// 7.5 s) to find what the node knew already, while the client waits, holding
// a connection and a goroutine each. Before, every such task tried the
// brokers.
func TestTaskRefusedAtOnceWhileTheBrokersAreKnownUnreachable(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			kc.Close()
		}
	})
	env := kafkaEnv{brokers: kc.ListenAddrs(), prefix: uniqueTopicPrefix(t)}
	clients, err := kafka.DialNode(env.brokers, "troupe-test-"+t.Name(), env.layout(3), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	pub := &taskCountingPublisher{Publisher: clients.Publisher}
	n := nodetest.Start(t, node.Config{Bus: &node.Bus{Publisher: pub, Tasks: clients.Group, Live: clients.Live}})
	env.waitTopic(t, messages.TopicTasks)
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	if code, body, err := postTask(srv.URL, `{"input":"up","session_id":"up"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks with the broker up: %d %s %v", code, body, err)
	}
	if got := pub.tasks.Load(); got != 1 {
		t.Fatalf("tasks published with the broker up: %d, want 1", got)
	}

	kc.Close()
	stopped = true
	waitFor(t, 20*time.Second, "/healthz to answer 503 with the broker down", func() bool {
		code, _ := healthBody(t, n.Handler())
		return code == http.StatusServiceUnavailable
	})
	code, body, err := postTask(srv.URL, `{"input":"down","session_id":"down"}`)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot be reached") {
		t.Errorf("POST /v1/tasks with the broker known down: %d %s %v; want 503 saying that the brokers cannot be reached", code, body, err)
	}
	if got := pub.tasks.Load(); got != 1 {
		t.Errorf("tasks published once the node knew the broker down: %d more; want none, the task refused at once", got-1)
	}
}
