package node_test

import (
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/troupe-run/troupe/messages"
)

// confluent-kafka for Python sends a header given None (headers=[("session_id",
// None)]) as a null value, which the node read as "": a keyed task's session_id
// header then named another session than its key, and the task was refused with
// no result on troupe.results, so that its client waited for ever. A header
// without a value is read as absent: the keyed task runs in its key's session, the
// unkeyed one in its body's.
func TestKafkaTaskWithANullHeaderRuns(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	prefix := "nullhdr-" + time.Now().Format("150405.000000")
	keyed, named := prefix+"-keyed", prefix+"-named"
	k.produce(t,
		kgo.Message{Key: []byte(keyed), Headers: []protocol.Header{{Key: messages.MetaSessionID, Value: nil}},
			Value: []byte(`{"input":"echo keyed","task_id":"t-1"}`)},
		kgo.Message{Headers: []protocol.Header{{Key: messages.MetaSessionID, Value: nil}, {Key: messages.MetaType, Value: nil}},
			Value: []byte(`{"input":"echo named","session_id":"` + named + `","task_id":"t-2"}`)})
	res := waitResults(t, k, 60*time.Second, "the results of the tasks with a null header", func(res map[string]messages.TaskResult) bool {
		_, a := res[keyed]
		_, b := res[named]
		return a && b
	})
	if r := res[keyed]; r.Status != messages.StatusCompleted || r.Output != "keyed" || r.TaskID != "t-1" {
		t.Errorf("the keyed task: %+v", r)
	}
	if r := res[named]; r.Status != messages.StatusCompleted || r.Output != "named" || r.TaskID != "t-2" {
		t.Errorf("the task named by its session_id: %+v", r)
	}
}
