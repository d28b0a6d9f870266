package node_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

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
	refusedBehindItsTask(t, "noinput-behind", func(session string) []kgo.Message {
		return []kgo.Message{
			{Value: []byte(`{"session_id":"` + session + `","task_id":"t-1"}`)},
			{Value: []byte(`{"session_id":"` + session + `","task_id":"t-2"}`)},
		}
	}, "t-2")
}
