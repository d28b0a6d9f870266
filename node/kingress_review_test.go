//go:build review

package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A malformed record as large as a Java producer sends at its defaults
// (max.request.size 1 MiB; the broker's message.max.bytes is 1 MiB and 12 bytes)
// is poisoned, and the session's next task runs. The poisoned copy carries the
// record and the poison middleware's headers (the reason, the topic, the handler,
// the message's ID): over the 1 MiB the node's producer sends, troupe.poison was
// never given it, the record was handled again every 500 ms for ever, and the
// session's next task (its order key is the record's key) never ran.
func TestNearLimitMalformedRecordIsPoisonedAndItsSessionMoves(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "nearlimit-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := `{"input":"` + strings.Repeat("x", 1_048_450-len(`{"input":"`)) // no closing quote: malformed
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(big)}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task next: %+v (found %v), want it completed", res, ok)
	}
	poisoned := 0
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) == session {
			poisoned++
		}
	})
	if poisoned != 1 {
		t.Errorf("poisoned %d records keyed %s, want the malformed one", poisoned, session)
	}
}
