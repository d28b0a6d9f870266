package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A reply_topic of up to 249 characters passed the task's checks on a node with a
// --topic-prefix, which the bus puts before it: "replies." and 241 more under
// "prod." is 254 characters, a name Kafka never takes. The task ran and its result
// was never published there (the publisher refused the name, and the outbox
// retried it for as long as the node ran). Such a task is refused when it is
// submitted now, over the bus (troupe.poison, the reason naming the prefix) and
// through Submit (POST /v1/tasks, node run), as a reply_topic over 249 is.
func TestReplyTopicTooLongBehindTheTopicPrefixIsRefused(t *testing.T) {
	k := newKafkaEnv(t)
	clients, err := kafka.DialNode(k.brokers, "troupe-test-"+t.Name()+time.Now().Format("150405.000000"), k.layout(3), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	n := nodetest.Start(t, node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
		TopicPrefix: k.prefix}})
	k.waitTopic(t, messages.TopicTasks)

	long := "replies." + strings.Repeat("x", kafka.MaxTopicNameLength-len(k.prefix)-len("replies.")+1)
	session := "reply-prefix-" + time.Now().Format("150405.000000")
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo long","task_id":"long","reply_topic":"` + long + `"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	// Refused, it is told so on troupe.results (its reply topic, refused, gets nothing).
	if res, ok := waitTaskResult(t, k, session, "long", time.Second); !ok || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected ||
		!strings.Contains(res.Error, k.prefix) {
		t.Errorf("task long: %+v (found %v); want it rejected, the error naming the prefix", res, ok)
	}
	reasons := poisonReasons(t, k, session)
	if len(reasons) != 1 || !strings.Contains(reasons[0], "reply_topic") || !strings.Contains(reasons[0], k.prefix) {
		t.Errorf("poisoned with reasons %q; want one naming the reply_topic and the prefix %s", reasons, k.prefix)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, node.Task{Input: "echo long", ReplyTopic: long}); !errors.Is(err, node.ErrBadTask) {
		t.Errorf("Submit with a reply_topic too long behind the prefix: %v; want ErrBadTask", err)
	}
	// One that fits behind the prefix is taken.
	if _, err := n.Submit(ctx, node.Task{Input: "echo fits", ReplyTopic: long[1:]}); err != nil {
		t.Errorf("Submit with a reply_topic of %d characters behind a prefix of %d: %v", len(long)-1, len(k.prefix), err)
	}
}
