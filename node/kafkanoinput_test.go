package node_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// A Kafka client that writes a task with a session_id and a task_id but no
// "input" (or only a session_id) read nothing on troupe.results: the record was
// poisoned without a word, and its client waited for ever. It reads a result
// keyed by its session, marked type=task.rejected, naming its task_id (else the
// record's ID) and saying that "input" is missing; a task written after it runs.
func TestKafkaTaskWithoutInputIsAnswered(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	prefix := "noinput-" + time.Now().Format("150405.000000")
	named, bare, after := prefix+"-named", prefix+"-bare", prefix+"-after"
	k.produce(t,
		kgo.Message{Key: []byte(named), Value: []byte(`{"session_id":"` + named + `","task_id":"t-1"}`)},
		kgo.Message{Key: []byte(bare), Value: []byte(`{"session_id":"` + bare + `"}`)},
		kgo.Message{Key: []byte(after), Value: []byte(`{"input":"echo after"}`)})
	res := waitResults(t, k, 60*time.Second, "the results of the tasks without input and of the task after them", func(res map[string]messages.TaskResult) bool {
		_, a := res[named]
		_, b := res[bare]
		_, c := res[after]
		return a && b && c
	})
	for session, task := range map[string]string{named: "t-1", bare: ""} {
		r := res[session]
		if r.Status != messages.StatusFailed || r.Reason != messages.ReasonRejected || !strings.Contains(r.Error, `no "input"`) ||
			task != "" && r.TaskID != task || task == "" && !strings.HasPrefix(r.TaskID, "kafka:") {
			t.Errorf("session %s: %+v; want it rejected for its missing input, naming task %q (else its record)", session, r, task)
		}
		recs := topicRecords(t, k, messages.TopicResults, session)
		if len(recs) != 1 {
			t.Errorf("session %s: %d records on %s keyed by it, want 1", session, len(recs), messages.TopicResults)
			continue
		}
		typ := ""
		for _, h := range recs[0].Headers {
			if h.Key == messages.MetaType {
				typ = string(h.Value)
			}
		}
		var body map[string]any
		_ = json.Unmarshal(recs[0].Value, &body)
		if typ != messages.TypeTaskRejected || body["session_id"] != session {
			t.Errorf("session %s: record of type %q, body %s; want type %s", session, typ, recs[0].Value, messages.TypeTaskRejected)
		}
	}
	if r := res[after]; r.Status != messages.StatusCompleted || r.Output != "after" {
		t.Errorf("the task after them: %+v", r)
	}
}

// A task and, right behind it, a cancellation sent without its type header
// ({"session_id", "task_id"} naming that task), written by a producer whose
// partitioner is not Troupe's (kcat's by default) on a partition other than
// their session's: the task was forwarded to its session's partition, and the
// body without input, judged at once where it was read, found no task of that
// task_id in the log yet and got a rejected result naming the task, which a
// client took for its failure while it ran. It is judged on the session's
// owner, after the task: no result names the task but its own.
func TestKafkaTaskWithoutInputBehindItsTaskOnAnotherPartitionIsNotAnswered(t *testing.T) {
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 1)
	session := "noinput-behind-" + time.Now().Format("150405.000000")
	misplaced := strconv.Itoa((kafka.PartitionOf(session, forwardPartitions) + 1) % forwardPartitions)
	on := []kgo.Header{{Key: partitionHeader, Value: []byte(misplaced)}}
	tr := &kgo.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(), RequiredAcks: kgo.RequireAll, Transport: tr}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Headers: on, Value: []byte(`{"input":"What is 2*3?","session_id":"` + session + `","task_id":"t-1"}`)},
		kgo.Message{Key: []byte(session), Headers: on, Value: []byte(`{"session_id":"` + session + `","task_id":"t-1"}`)},
		kgo.Message{Key: []byte(session), Headers: on, Value: []byte(`{"session_id":"` + session + `","task_id":"t-2"}`)}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	var got []result
	waitFor(t, 60*time.Second, "the task's result and the rejection of the body behind it", func() bool {
		got = got[:0]
		ran, behind := false, false
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			var r result
			if err := json.Unmarshal(m.Value, &r); err != nil {
				t.Fatalf("%s: %v", m.Value, err)
			}
			got = append(got, r)
			ran = ran || r.TaskID == "t-1" && r.Status == messages.StatusCompleted
			behind = behind || r.TaskID == "t-2"
		}
		return ran && behind
	})
	for _, r := range got {
		if r.TaskID == "t-1" && r.Status != messages.StatusCompleted {
			t.Errorf("a result of t-1 that is not its own: %+v (results %+v)", r, got)
		}
		if r.TaskID == "t-2" && r.Reason != messages.ReasonRejected {
			t.Errorf("the body without input naming no task: %+v", r)
		}
	}
}
