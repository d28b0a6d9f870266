package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A topic deleted and created again (or a new Kafka cluster in front of the same
// log) starts its offsets at 0 again. Were the ID of a task record without a
// task_id and without Troupe's UUID header its coordinates alone,
// kafka:<topic>/<partition>/<offset>, a new task of a session would get the ID of
// that session's first task, which the session has seen, and be dropped as a
// duplicate; a new session's would get the ID of another session's. The record's
// timestamp in its ID tells them apart.
func TestTasksAfterTheTopicIsCreatedAgainRun(t *testing.T) {
	log := sharedLog(t)
	kA := newKafkaEnv(t)
	stamp := time.Now().Format("150405.000000")
	same, other := "again-"+stamp, ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("other-%s-%d", stamp, i); kafka.PartitionOf(id, 3) == kafka.PartitionOf(same, 3) {
			other = id
		}
	}
	first, third := "first-"+stamp, "third-"+stamp
	n1 := kA.nodeWith(t, node.Config{Log: log})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wA := kA.writer(t, messages.TopicTasks)
	if err := wA.WriteMessages(ctx, kgo.Message{Key: []byte(same), Value: []byte(`{"input":"echo ` + first + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if res := readResult(t, kA, same); res.Output != first {
		t.Fatalf("first result %+v", res)
	}
	wA.Close()
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}
	// The same topics on another cluster (or created again): offsets from 0.
	kB := kafkaEnv{brokers: brokers(t), prefix: kA.prefix}
	kB.nodeWith(t, node.Config{Log: log})
	wB := kB.writer(t, messages.TopicTasks)
	defer wB.Close()
	if err := wB.WriteMessages(ctx, kgo.Message{Key: []byte(same), Value: []byte(`{"input":"echo second"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := wB.WriteMessages(ctx, kgo.Message{Key: []byte(other), Value: []byte(`{"input":"echo ` + third + `"}`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var got map[string]messages.TaskResult
	for time.Now().Before(deadline) {
		got = topicResults(t, kB)
		if got[same].Output == "second" && got[other].Output == third {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Errorf("results on the new topic: %s %+v, %s %+v; want the second task of %s and the first of %s run", same, got[same], other, got[other], same, other)
	for _, s := range []string{same, other} {
		events, _ := log.Read(ctx, s, 1)
		for _, e := range events {
			t.Logf("%s: %d %s %s", s, e.Seq, e.Type, e.ID)
		}
	}
}

// A task record without a task_id and without Troupe's UUID header that an earlier
// version recorded under its coordinates alone (kafka:<topic>/<partition>/<offset>)
// and that is read again after an upgrade (its offset not committed, or the group's
// offsets reset) is not run again; a task recorded under the same coordinates for
// another record (one written before this one, or with another input: the topic was
// created again) does not stop it. A record read again under its new ID (another
// group reading the topic from its start) is not run again either.
func TestRecordsReadAgainAfterAnUpgradeRunOnce(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	stamp := time.Now().Format("150405.000000")
	upgraded, older, otherInput, fresh := "upgraded-"+stamp, "older-"+stamp, "input-"+stamp, "fresh-"+stamp
	n1 := k.nodeWith(t, node.Config{Log: log}) // creates the topics
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	for _, s := range []string{upgraded, older, otherInput} {
		if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(s), Value: []byte(`{"input":"echo ` + s + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A record with neither key nor session: its session was named after its ID.
	if err := w.WriteMessages(ctx, kgo.Message{Value: []byte(`{"input":"echo keyless"}`)}); err != nil {
		t.Fatal(err)
	}
	keyless := findRecord(t, k, messages.TopicTasks, "")
	keylessID := fmt.Sprintf("kafka:%s/%d/%d", keyless.Topic, keyless.Partition, keyless.Offset)
	keylessSession := "task." + strings.NewReplacer("/", "-", ":", "-").Replace(keylessID)
	// What an earlier version recorded under the records' coordinates.
	legacy := func(session, input string, at time.Time) {
		rec := keyless
		if session != keylessSession {
			rec = findRecord(t, k, messages.TopicTasks, session)
		}
		id := fmt.Sprintf("kafka:%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
		submitted, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input})
		if err != nil {
			t.Fatal(err)
		}
		submitted.ID, submitted.SessionID, submitted.Seq, submitted.TS, submitted.Actor, submitted.CorrelationID = id, session, 1, at.UnixMicro(), "session", id
		completed, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "earlier"})
		if err != nil {
			t.Fatal(err)
		}
		completed.ID, completed.SessionID, completed.Seq, completed.TS, completed.Actor, completed.CorrelationID = session+"/2", session, 2, at.UnixMicro()+1, "session", id
		if err := log.Append(ctx, []messages.Envelope{submitted, completed}); err != nil {
			t.Fatal(err)
		}
		if rec.Time.IsZero() {
			t.Fatalf("record %s has no timestamp", id)
		}
	}
	at := func(s string) time.Time { return findRecord(t, k, messages.TopicTasks, s).Time }
	legacy(keylessSession, "echo keyless", keyless.Time.Add(5*time.Millisecond))
	legacy(upgraded, "echo "+upgraded, at(upgraded).Add(5*time.Millisecond))
	legacy(older, "echo "+older, at(older).Add(-time.Hour))
	legacy(otherInput, "echo something else", at(otherInput).Add(5*time.Millisecond))

	submissions := func(session string) []messages.Envelope {
		events, err := log.Read(ctx, session, 1)
		if err != nil {
			t.Fatal(err)
		}
		var out []messages.Envelope
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				out = append(out, e)
			}
		}
		return out
	}
	// A sentinel behind the upgraded record, on its partition: once it ran, the
	// node had handled the record.
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(upgraded), Value: []byte(`{"input":"echo sentinel"}`)},
		kgo.Message{Key: []byte(fresh), Value: []byte(`{"input":"echo ` + fresh + `"}`)}); err != nil {
		t.Fatal(err)
	}
	waitResults := func(want map[string]string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var got map[string]messages.TaskResult
		for time.Now().Before(deadline) {
			got = topicResults(t, k)
			done := true
			for s, out := range want {
				done = done && got[s].Output == out
			}
			if done {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("results %+v; want outputs %v", got, want)
	}
	var logs syncBuffer
	n2 := k.nodeWith(t, node.Config{Log: log, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitResults(map[string]string{upgraded: "sentinel", older: older, otherInput: otherInput, fresh: fresh})
	// The keyless record is read, perhaps forwarded to its session's partition,
	// and found recorded.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "recorded="+keylessID+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the keyless record %s was not found recorded; logs:\n%s", keylessID, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := submissions(keylessSession); len(got) != 1 {
		t.Errorf("session %s: %d tasks recorded; want the earlier one", keylessSession, len(got))
	}
	renamed := keylessSession + "-" + strconv.FormatInt(keyless.Time.UnixMilli(), 10)
	if events, err := log.Read(ctx, renamed, 1); err != nil || len(events) > 0 {
		t.Errorf("session %s of the keyless record read again: %d events, %v; want none", renamed, len(events), err)
	}
	for s, want := range map[string]int{upgraded: 2, older: 2, otherInput: 2, fresh: 1, keylessSession: 1} {
		if got := submissions(s); len(got) != want {
			t.Errorf("session %s: %d tasks recorded (%v); want %d", s, len(got), got, want)
		}
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	// Another group reads every record again: each is the task it was. A last task
	// of each session, behind them, runs.
	before := map[string]int{}
	last := map[string]string{}
	for _, s := range []string{upgraded, older, otherInput, fresh} {
		before[s] = len(submissions(s))
		last[s] = "last-" + s
		if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(s), Value: []byte(`{"input":"echo ` + last[s] + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	k.nodeWith(t, node.Config{Log: log})
	waitResults(last)
	for s, n := range before {
		if got := submissions(s); len(got) != n+1 {
			t.Errorf("session %s after a second reading: %d tasks recorded; want %d", s, len(got), n+1)
		}
	}
}
