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

// TestCommandRecordsWithoutAValueArePoisonedClearly: a record on troupe.tasks whose
// type header names a command (task.cancel, task.approval, memory.command,
// deltas.watch) and that has no value (a tombstone, or an empty value) goes to
// troupe.poison with a reason that says the record has no value, as a task without
// one does (it said "messages: corrupt envelope: EOF"), and the session's next task
// runs.
func TestCommandRecordsWithoutAValueArePoisonedClearly(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "cmdnovalue-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	types := []string{messages.TypeCancelRequested, messages.TypeApprovalAnswer, messages.TypeMemoryCommand, messages.TypeDeltaWatch}
	var records []kgo.Message
	for _, typ := range types {
		h := []kgo.Header{{Key: "type", Value: []byte(typ)}}
		records = append(records,
			kgo.Message{Key: []byte(session), Headers: h},                  // null: a tombstone
			kgo.Message{Key: []byte(session), Headers: h, Value: []byte{}}, // empty
		)
	}
	records = append(records, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next"}`)})
	if err := w.WriteMessages(ctx, records...); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, k, session); res.Status != messages.StatusCompleted || res.Output != "next" {
		t.Fatalf("result %+v, want the next task completed", res)
	}
	var reasons []string
	for _, m := range topicRecords(t, k, node.TopicPoison, session) {
		reasons = append(reasons, header(m, "reason_poisoned"))
	}
	if len(reasons) != 2*len(types) {
		t.Fatalf("poisoned %d records of %s, want %d: %q", len(reasons), session, 2*len(types), reasons)
	}
	for i, r := range reasons {
		if !strings.Contains(r, "the "+types[i/2]+" record has no value") {
			t.Errorf("poison reason %q does not say the %s record has no value", r, types[i/2])
		}
	}
}
