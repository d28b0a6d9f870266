//go:build review

package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A record refused for a header it gives (a stored header of 600 kB that names no
// stored task) is poisoned, and its session's next task runs: the reason quoted
// the header whole, and the poisoned copy, the header and the reason, was over
// 1 MiB whatever the payload.
func TestLongHeaderRefusedIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "longheader-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo refused"}`),
			Headers: []kgo.Header{{Key: messages.MetaStored, Value: []byte(strings.Repeat("s", 600_000))}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task next: %+v (found %v), want it completed", res, ok)
	}
}
