package node_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// refusedBehindItsTask runs one sharded node on partitioned topics and writes,
// on a partition other than the session's (as a producer whose partitioner is
// not Troupe's, kcat's by default, places them), the task t-1 of a session and,
// right behind it, the records behind returns for that session (their key and
// the partition are set here): some naming t-1 with what the node refuses, then
// the ones named in last, naming no task of the session. It waits for t-1's
// result and one for each of last, and fails on a result naming t-1 that is not
// its own (a refusal, judged before t-1 was recorded, taken by a client for
// t-1's failure while it ran) or one of last that is not a rejection.
func refusedBehindItsTask(t *testing.T, prefix string, behind func(session string) []kgo.Message, last ...string) {
	t.Helper()
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 1)
	session := prefix + "-" + time.Now().Format("150405.000000")
	misplaced := strconv.Itoa((kafka.PartitionOf(session, forwardPartitions) + 1) % forwardPartitions)
	records := append([]kgo.Message{{Value: []byte(`{"input":"What is 2*3?","session_id":"` + session + `","task_id":"t-1"}`)}}, behind(session)...)
	for i := range records {
		records[i].Key = []byte(session)
		records[i].Headers = append(records[i].Headers, kgo.Header{Key: partitionHeader, Value: []byte(misplaced)})
	}
	tr := &kgo.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(), RequiredAcks: kgo.RequireAll, Transport: tr}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, records...); err != nil {
		t.Fatal(err)
	}
	type result struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	var got []result
	waitFor(t, 60*time.Second, "the task's result and the rejections of the records behind it", func() bool {
		got = got[:0]
		ran, answered := false, map[string]bool{}
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			var r result
			if err := json.Unmarshal(m.Value, &r); err != nil {
				t.Fatalf("%s: %v", m.Value, err)
			}
			got = append(got, r)
			ran = ran || r.TaskID == "t-1" && r.Status == messages.StatusCompleted
			answered[r.TaskID] = true
		}
		for _, name := range last {
			if !answered[name] {
				return false
			}
		}
		return ran
	})
	for _, r := range got {
		if r.TaskID == "t-1" && r.Status != messages.StatusCompleted {
			t.Errorf("a result of t-1 that is not its own: %+v (results %+v)", r, got)
		}
		if slices.Contains(last, r.TaskID) && r.Reason != messages.ReasonRejected {
			t.Errorf("a refused record naming no task of the session: %+v", r)
		}
	}
}

// A named task and, right behind it, the same task_id sent again with a body
// the rules refuse (an agent the node does not run), written on a partition
// other than their session's: the task was forwarded to its session's
// partition, and the refused body, judged at once where it was read, found no
// task of that task_id in the log yet and got a rejected result naming the
// task, which a client took for its failure while it ran. It is judged on the
// session's owner, after the task: no result names the task but its own.
func TestKafkaRefusedBodyBehindItsTaskOnAnotherPartitionIsNotAnswered(t *testing.T) {
	refusedBehindItsTask(t, "refused-behind", func(session string) []kgo.Message {
		return []kgo.Message{
			{Value: []byte(`{"input":"What is 2*3?","agent":"no-such-agent","session_id":"` + session + `","task_id":"t-1"}`)},
			{Value: []byte(`{"input":"What is 2*3?","max_steps":-1,"session_id":"` + session + `","task_id":"t-1"}`)},
			{Value: []byte(`{"input":"What is 2*3?","agent":"no-such-agent","session_id":"` + session + `","task_id":"t-2"}`)},
		}
	}, "t-2")
}

// A named task and, right behind it, the same task refused for its record's
// headers (a type no node knows, type headers that disagree, a type header
// given twice, a session_id header other than its key), written on a partition
// other than their session's: judged where it was read, before the task
// forwarded just ahead of it was recorded, each got a rejected result naming
// the task, which ran. Each is judged on the session's owner, after the task;
// forwarded, each is still refused there (the headers it was refused for go
// with it), and one naming no task of the session is answered.
func TestKafkaRefusedHeadersBehindTheirTaskOnAnotherPartitionAreNotAnswered(t *testing.T) {
	refusedBehindItsTask(t, "headers-behind", func(session string) []kgo.Message {
		task := func(id string, headers ...kgo.Header) kgo.Message {
			return kgo.Message{Headers: headers, Value: []byte(`{"input":"What is 2*3?","session_id":"` + session + `","task_id":"` + id + `"}`)}
		}
		typo := kgo.Header{Key: messages.MetaType, Value: []byte("task.cancle")}
		submitted := kgo.Header{Key: messages.MetaType, Value: []byte(messages.TypeTaskSubmitted)}
		cancel := kgo.Header{Key: messages.MetaType, Value: []byte(messages.TypeCancelRequested)}
		miscased := kgo.Header{Key: "Type", Value: []byte(messages.TypeCancelRequested)}
		elsewhere := kgo.Header{Key: messages.MetaSessionID, Value: []byte(session + "-elsewhere")}
		return []kgo.Message{
			task("t-1", typo), task("t-1", submitted, cancel), task("t-1", submitted, miscased), task("t-1", elsewhere),
			task("t-2", typo), task("t-3", submitted, cancel), task("t-4", submitted, miscased), task("t-5", elsewhere),
		}
	}, "t-2", "t-3", "t-4", "t-5")
}
