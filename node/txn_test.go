package node_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	franz "github.com/twmb/franz-go/pkg/kgo"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

func header(m kgo.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestTransactionalTasks produces tasks the way a user's transactional producer
// does (confluent-kafka's or Java's, with a transactional.id; here franz-go's, with
// its default partitioner, Java's): a task in a transaction that is aborted never
// runs, and the next task of its session runs; one in a committed transaction runs
// once; and the transaction markers the broker writes into troupe.tasks are no tasks
// (they went to troupe.poison as malformed JSON, and the aborted task ran).
func TestTransactionalTasks(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.node(t)
	stamp := time.Now().Format("150405.000000")
	aborted, committed := "txn-aborted-"+stamp, "txn-committed-"+stamp
	cl, err := franz.NewClient(franz.SeedBrokers(k.brokers...), franz.DefaultProduceTopic(k.topic(messages.TopicTasks)),
		franz.TransactionalID("troupe-test-"+stamp), franz.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inTxn := func(commit bool, session, input string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &franz.Record{Key: []byte(session), Value: []byte(`{"input":"` + input + `"}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, franz.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	inTxn(false, aborted, "echo aborted")
	inTxn(true, committed, "echo committed")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(aborted), Value: []byte(`{"input":"echo after the abort"}`)}); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, k, aborted); res.Status != messages.StatusCompleted || res.Output != "after the abort" {
		t.Errorf("session %s: %+v, want the task after the aborted one completed", aborted, res)
	}
	if res := readResult(t, k, committed); res.Status != messages.StatusCompleted || res.Output != "committed" {
		t.Errorf("session %s: %+v, want the committed task completed", committed, res)
	}
	for session, want := range map[string]int{aborted: 1, committed: 1} {
		events, err := n.Log().Read(ctx, session, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				got++
				if strings.Contains(string(e.Payload), "echo aborted") {
					t.Errorf("session %s recorded the aborted task: %s", session, e.Payload)
				}
			}
		}
		if got != want {
			t.Errorf("session %s recorded %d tasks, want %d", session, got, want)
		}
	}
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		t.Errorf("poisoned: key %q value %q, reason %q", m.Key, m.Value, header(m, "reason_poisoned"))
	})
}

// TestRecordsWithoutAValueArePoisonedClearly: a tombstone (null value) and an empty
// value on troupe.tasks go to troupe.poison with a reason that says the record has no
// value (it said "malformed JSON: unexpected end of JSON input"), and the session's
// next task runs.
func TestRecordsWithoutAValueArePoisonedClearly(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "novalue-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(session)},                  // null: a tombstone
		kgo.Message{Key: []byte(session), Value: []byte{}}, // empty
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, k, session); res.Status != messages.StatusCompleted || res.Output != "next" {
		t.Fatalf("result %+v, want the next task completed", res)
	}
	reasons := poisonReasons(t, k, session)
	if len(reasons) != 2 {
		t.Fatalf("poisoned %d records of %s, want 2: %q", len(reasons), session, reasons)
	}
	for _, r := range reasons {
		if !strings.Contains(r, "the record has no value") {
			t.Errorf("poison reason %q does not say the record has no value", r)
		}
	}
}

// TestConfluentKafkaPythonTransactions is TestTransactionalTasks with PyPI's
// confluent-kafka, a user's default Python client: a task aborted never runs, the
// session's next task does, a committed one runs once, nothing is poisoned.
func TestConfluentKafkaPythonTransactions(t *testing.T) {
	py := testPython(t)
	k := newKafkaEnv(t)
	n := k.node(t)
	stamp := time.Now().Format("150405.000000")
	aborted, committed := "py-aborted-"+stamp, "py-committed-"+stamp
	script, err := filepath.Abs(filepath.Join("testdata", "produce_txn.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, strings.Join(k.brokers, ","), k.topic(messages.TopicTasks), "troupe-test-py-"+stamp)
	// The task after the aborted one goes in a transaction of its own, by the same
	// producer (its partitioner puts it on the aborted one's partition, after it).
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		"abort|" + aborted + `|{"input":"echo aborted"}`,
		"commit|" + aborted + `|{"input":"echo after the abort"}`,
		"commit|" + committed + `|{"input":"echo committed"}`,
	}, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("confluent-kafka transactional producer: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res := readResult(t, k, aborted); res.Status != messages.StatusCompleted || res.Output != "after the abort" {
		t.Errorf("session %s: %+v, want the task after the aborted one completed", aborted, res)
	}
	if res := readResult(t, k, committed); res.Status != messages.StatusCompleted || res.Output != "committed" {
		t.Errorf("session %s: %+v, want the committed task completed", committed, res)
	}
	for _, session := range []string{aborted, committed} {
		events, err := n.Log().Read(ctx, session, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				got++
			}
		}
		if got != 1 {
			t.Errorf("session %s recorded %d tasks, want 1", session, got)
		}
	}
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		t.Errorf("poisoned: key %q value %q, reason %q", m.Key, m.Value, header(m, "reason_poisoned"))
	})
}
