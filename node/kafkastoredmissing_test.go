package node_test

import (
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A record on troupe.tasks whose stored header names a stored task's stream
// (bus/task/…) that the log does not hold (a record copied from another
// cluster, a poisoned record sent back with its headers, one read again after
// its message was pruned) was retried for ever: its session's later tasks never
// ran, nor, once 64 records were past it, any of its partition. It is refused to
// troupe.poison saying so, and the session moves on.
func TestTaskNamingAStoredStreamTheLogLacksIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "storedmissing-" + time.Now().Format("150405.000000")
	missing := messages.BusStream(messages.BusStoredTask, "no-such-task")
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo refused","task_id":"refused"}`),
			Headers: []kgo.Header{{Key: messages.MetaStored, Value: []byte(missing)}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	reasons := poisonReasons(t, k, session)
	if len(reasons) != 1 || !strings.Contains(reasons[0], missing) {
		t.Errorf("poisoned with reasons %q; want one naming %s", reasons, missing)
	}
}
