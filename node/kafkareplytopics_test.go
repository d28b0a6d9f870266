package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task's reply_topic is named by whoever can write to troupe.tasks (or POST
// /v1/tasks). The node created any missing one (12 partitions), on a broker
// that creates none itself: a client could have the cluster make topics without
// bound. It creates now only the names the operator allows (ReplyTopics: by
// default those starting with "replies."), up to a count; another reply topic
// gets its result only if it exists.

// replyTopicsNode runs a node on k whose topic layout creates reply topics as
// rt says, and returns it.
func replyTopicsNode(t *testing.T, k kafkaEnv, rt *node.ReplyTopics) *node.Node {
	t.Helper()
	layout := k.layout(3)
	layout.Creatable, layout.Settled = rt.Creatable, rt.Settled
	clients, err := kafka.DialNode(k.brokers, "troupe-test-"+t.Name()+time.Now().Format("150405.000000"), layout, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	n := nodetest.Start(t, node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live}})
	k.waitTopic(t, messages.TopicTasks)
	return n
}

// topicPartitions returns the partitions the broker has of the Troupe topic
// name (0: it does not exist), asked afresh.
func topicPartitions(t *testing.T, k kafkaEnv, name string) int {
	t.Helper()
	conn, err := kgo.Dial("tcp", k.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(k.topic(name))
	if errors.Is(err, kgo.UnknownTopicOrPartition) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(parts)
}

// runReplyTask submits a task with a reply topic to session and waits for its
// result on troupe.results.
func runReplyTask(t *testing.T, k kafkaEnv, session, taskID, replyTopic string) {
	t.Helper()
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo ` + taskID + `","task_id":"` + taskID + `","reply_topic":"` + replyTopic + `"}`)})
	if res, ok := waitTaskResult(t, k, session, taskID, 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task %s: %+v (found %v), want it completed", taskID, res, ok)
	}
}

// replyTaskIDs returns the task IDs of the results on the Troupe topic name for session.
func replyTaskIDs(t *testing.T, k kafkaEnv, name, session string) string {
	t.Helper()
	var ids []string
	for _, m := range topicRecords(t, k, name, session) {
		var res messages.TaskResult
		if json.Unmarshal(m.Value, &res) == nil {
			ids = append(ids, res.TaskID)
		}
	}
	return strings.Join(ids, ",")
}

// waitRefused waits up to a minute until the node has refused a reply topic
// (troupe_bus_reply_topic_refusals_total) or the broker has the Troupe topic
// name, and fails the test if it has the topic.
func waitRefused(t *testing.T, k kafkaEnv, n *node.Node, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for metricValue(t, n, "troupe_bus_reply_topic_refusals_total") < 1 {
		if got := topicPartitions(t, k, name); got != 0 {
			t.Fatalf("the reply topic %s was created (%d partitions); want it refused", name, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reply topic refused after a minute; want %s refused", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := topicPartitions(t, k, name); got != 0 {
		t.Errorf("the reply topic %s has %d partitions; want it not created", name, got)
	}
}

func TestReplyTopicOutsideTheAllowedNamesIsNotCreated(t *testing.T) {
	k := newKafkaEnv(t)
	n := replyTopicsNode(t, k, &node.ReplyTopics{Create: node.DefaultReplyTopicPrefixes, Max: node.DefaultMaxReplyTopics})
	// A topic the operator made: published to, whatever its name.
	conn, err := kgo.Dial("tcp", k.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.CreateTopics(kgo.TopicConfig{Topic: k.topic("made.replies"), NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	session := "reply-names-" + time.Now().Format("150405.000000")
	runReplyTask(t, k, session, "one", "attacker.topic.1")
	runReplyTask(t, k, session, "two", "made.replies")
	runReplyTask(t, k, session, "three", "replies.alice")
	waitRefused(t, k, n, "attacker.topic.1")
	// The other replies flowed, past the refused one.
	deadline := time.Now().Add(time.Minute)
	for replyTaskIDs(t, k, "made.replies", session) != "two" || replyTaskIDs(t, k, "replies.alice", session) != "three" {
		if time.Now().After(deadline) {
			t.Fatalf("made.replies holds %q, replies.alice %q; want two and three", replyTaskIDs(t, k, "made.replies", session), replyTaskIDs(t, k, "replies.alice", session))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := topicPartitions(t, k, "replies.alice"); got != node.ReplyTopicPartitions {
		t.Errorf("the created reply topic replies.alice has %d partitions; want %d", got, node.ReplyTopicPartitions)
	}
	if got := topicPartitions(t, k, "made.replies"); got != 2 {
		t.Errorf("made.replies has %d partitions; want the operator's 2", got)
	}
}

func TestReplyTopicsCreatedAreCapped(t *testing.T) {
	k := newKafkaEnv(t)
	rt := &node.ReplyTopics{Create: []string{"*"}, Max: 2}
	n := replyTopicsNode(t, k, rt)
	session := "reply-cap-" + time.Now().Format("150405.000000")
	runReplyTask(t, k, session, "one", "replies.one")
	runReplyTask(t, k, session, "two", "any.two")
	runReplyTask(t, k, session, "three", "replies.three")
	// A topic created already is not counted again.
	runReplyTask(t, k, session, "four", "replies.one")
	waitRefused(t, k, n, "replies.three")
	deadline := time.Now().Add(time.Minute)
	for replyTaskIDs(t, k, "replies.one", session) != "one,four" || replyTaskIDs(t, k, "any.two", session) != "two" {
		if time.Now().After(deadline) {
			t.Fatalf("replies.one holds %q, any.two %q; want one,four and two", replyTaskIDs(t, k, "replies.one", session), replyTaskIDs(t, k, "any.two", session))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rt.Created() != 2 {
		t.Errorf("Created() = %d; want 2", rt.Created())
	}
	if got := metricValue(t, n, "troupe_bus_reply_topic_refusals_total"); got != 1 {
		t.Errorf("troupe_bus_reply_topic_refusals_total = %v; want 1", got)
	}
}

func TestReplyTopicsRefuseWithAReason(t *testing.T) {
	rt := &node.ReplyTopics{Create: []string{"replies."}, Max: 1}
	if _, err := rt.Creatable("troupe.results", kafka.TopicConfig{Partitions: 12}); err != nil {
		t.Errorf("the node's own topic: %v", err)
	}
	if _, err := rt.Creatable("other", kafka.TopicConfig{}); !errors.Is(err, node.ErrReplyTopicNotCreated) || !strings.Contains(err.Error(), "--reply-topics-create") {
		t.Errorf("a name not allowed: %v", err)
	}
	if tc, err := rt.Creatable("replies.a", kafka.TopicConfig{Partitions: 12}); err != nil || tc.Partitions != node.ReplyTopicPartitions {
		t.Errorf("an allowed name: %+v, %v", tc, err)
	}
	if _, err := rt.Creatable("replies.b", kafka.TopicConfig{}); !errors.Is(err, node.ErrReplyTopicNotCreated) || !strings.Contains(err.Error(), "--reply-topics-max 1") {
		t.Errorf("past the cap: %v", err)
	}
	rt.Listed = []string{"listed.replies"}
	if tc, err := rt.Creatable("listed.replies", kafka.TopicConfig{Partitions: 6}); err != nil || tc.Partitions != 6 {
		t.Errorf("a topic of --topics past the cap: %+v, %v; want it created as listed", tc, err)
	}
	for _, bad := range []string{"troupe.", "a,,b", "a b"} {
		if _, err := node.ParseReplyTopicPrefixes(bad); err == nil {
			t.Errorf("ParseReplyTopicPrefixes(%q): no error", bad)
		}
	}
	if got, err := node.ParseReplyTopicPrefixes("none"); err != nil || got != nil {
		t.Errorf("none: %v, %v", got, err)
	}
}

// The cap counts the reply topics the node created, not those it allowed: a
// creation that failed gives its place back, and the place of a topic created is
// kept for good (asked again, it takes none). Past Max distinct topics created,
// the next one is refused, saying the cap. Before, a place was taken when a topic
// was allowed and never given back: after Max failed creations the node refused
// every reply topic.
func TestReplyTopicsCapCountsTopicsCreated(t *testing.T) {
	const max = 100
	rt := &node.ReplyTopics{Create: node.DefaultReplyTopicPrefixes, Max: max}
	create := func(topic string, created bool) error {
		t.Helper()
		if _, err := rt.Creatable(topic, kafka.TopicConfig{}); err != nil {
			return err
		}
		rt.Settled(topic, created)
		return nil
	}
	for i := range 3 * max {
		if err := create(fmt.Sprintf("replies.failed.%d", i), false); err != nil {
			t.Fatalf("failed creation %d: refused: %v; want allowed (failures take no place)", i, err)
		}
	}
	for i := range max {
		if err := create(fmt.Sprintf("replies.%d", i), true); err != nil {
			t.Fatalf("reply topic %d of %d: %v", i+1, max, err)
		}
		if i == max/2 {
			// One of them again: no new place.
			if err := create("replies.0", true); err != nil {
				t.Fatalf("a reply topic created already: %v", err)
			}
		}
	}
	if rt.Created() != max {
		t.Errorf("Created() = %d; want %d", rt.Created(), max)
	}
	err := create("replies.one-too-many", true)
	if !errors.Is(err, node.ErrReplyTopicNotCreated) || !strings.Contains(err.Error(), fmt.Sprintf("--reply-topics-max %d", max)) ||
		!strings.Contains(err.Error(), "replies.one-too-many") {
		t.Errorf("the %dth distinct reply topic: %v; want ErrReplyTopicNotCreated naming it and --reply-topics-max %d", max+1, err, max)
	}
	if err := create("replies.7", true); err != nil {
		t.Errorf("a reply topic created already, at the cap: %v; want it allowed", err)
	}

	// A place is taken while a creation is under way, so that concurrent ones
	// cannot pass the cap together; it is given back if the creation fails.
	rt = &node.ReplyTopics{Create: []string{"replies."}, Max: 1}
	if _, err := rt.Creatable("replies.a", kafka.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Creatable("replies.b", kafka.TopicConfig{}); !errors.Is(err, node.ErrReplyTopicNotCreated) || !strings.Contains(err.Error(), "being created") {
		t.Errorf("a second topic while the first is created: %v; want it refused, saying one is being created", err)
	}
	rt.Settled("replies.a", false)
	if _, err := rt.Creatable("replies.b", kafka.TopicConfig{}); err != nil {
		t.Errorf("a topic once the only other creation failed: %v; want it allowed", err)
	}
	if rt.Created() != 0 {
		t.Errorf("Created() = %d with nothing created; want 0", rt.Created())
	}
}

// On Kafka: reply topics whose creation the broker refuses (a policy) take no
// place under --reply-topics-max; their tasks are answered on troupe.results as
// any task is. The topics created next take the places, and the one past the cap
// is refused and counted.
func TestReplyTopicsRefusedByTheBrokerTakeNoPlace(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.CreateTopicsRequest)
		bad := false
		for _, tp := range req.Topics {
			bad = bad || strings.Contains(tp.Topic, "replies.bad.")
		}
		if !bad {
			return nil, nil, false // created as usual
		}
		c.KeepControl()
		res := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic = tp.Topic
			rt.ErrorCode = 44 // POLICY_VIOLATION
			res.Topics = append(res.Topics, rt)
		}
		return res, nil, true
	})
	k := kafkaEnv{brokers: c.ListenAddrs(), prefix: uniqueTopicPrefix(t)}
	rt := &node.ReplyTopics{Create: node.DefaultReplyTopicPrefixes, Max: 2}
	n := replyTopicsNode(t, k, rt)
	session := "reply-failed-" + time.Now().Format("150405.000000")
	for i := range 3 {
		runReplyTask(t, k, session, fmt.Sprintf("bad%d", i), fmt.Sprintf("replies.bad.%d", i))
	}
	runReplyTask(t, k, session, "one", "replies.one")
	runReplyTask(t, k, session, "two", "replies.two")
	runReplyTask(t, k, session, "three", "replies.three")
	waitRefused(t, k, n, "replies.three")
	deadline := time.Now().Add(time.Minute)
	for replyTaskIDs(t, k, "replies.one", session) != "one" || replyTaskIDs(t, k, "replies.two", session) != "two" {
		if time.Now().After(deadline) {
			t.Fatalf("replies.one holds %q, replies.two %q; want one and two", replyTaskIDs(t, k, "replies.one", session), replyTaskIDs(t, k, "replies.two", session))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rt.Created() != 2 {
		t.Errorf("Created() = %d; want 2", rt.Created())
	}
	for i := range 3 {
		if got := topicPartitions(t, k, fmt.Sprintf("replies.bad.%d", i)); got != 0 {
			t.Errorf("replies.bad.%d has %d partitions; want it not created", i, got)
		}
	}
}
