package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// waitTaskResult waits up to d for the result of task taskID of session on
// troupe.results, and reports whether it came.
func waitTaskResult(t *testing.T, k kafkaEnv, session, taskID string, d time.Duration) (messages.TaskResult, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, m := range topicRecords(t, k, messages.TopicResults, session) {
			var res messages.TaskResult
			if json.Unmarshal(m.Value, &res) == nil && res.TaskID == taskID {
				return res, true
			}
		}
		if time.Now().After(deadline) {
			return messages.TaskResult{}, false
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// A cancel on troupe.tasks whose session_id is long (600 kB: under kcat's default
// message.max.bytes of 1,000,000) is refused; the reason quoted the session_id
// whole, so the poisoned copy (the record and its reason) was over the 1 MiB a
// Kafka message holds: troupe.poison refused it, the record was handled again
// every 500 ms for ever, its offset never committed, and once 64 records of its
// partition were past it (NodeTasksInFlight) nothing more of the partition ran.
func TestLongRefusedCancelIsPoisonedAndItsPartitionMoves(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "longcancel-" + time.Now().Format("150405.000000")
	long := strings.Repeat("a", 600_000)
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(`{"session_id":"` + long + `"}`),
		Headers: []kgo.Header{{Key: "type", Value: []byte(messages.TypeCancelRequested)}}})
	const tasks = 70
	var recs []kgo.Message
	for i := range tasks {
		recs = append(recs, kgo.Message{Key: []byte(session), Value: []byte(fmt.Sprintf(`{"input":"echo %d","task_id":"t-%d"}`, i, i))})
	}
	k.produce(t, recs...)
	last := fmt.Sprintf("t-%d", tasks-1)
	if res, ok := waitTaskResult(t, k, session, last, 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task %s: %+v (found %v), want it completed", last, res, ok)
	}
	poisoned := 0
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) == session {
			poisoned++
		}
	})
	if poisoned != 1 {
		t.Errorf("poisoned %d records keyed %s, want the cancel", poisoned, session)
	}
}

// TestRefusalsQuoteTheHeadOfLongValues: what a record on troupe.tasks gives (its
// key, a cancel's or an approval's session_id, call and by, a key of its JSON) is
// quoted in the reason it is refused with, which goes on troupe.poison with the
// record; each is quoted by its head, so that the reason stays short and the
// poisoned copy is no larger than the record by more than a few hundred bytes.
func TestRefusalsQuoteTheHeadOfLongValues(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	in := n.Ingress()
	long := strings.Repeat("a", 100_000)
	bus := func(payload, key string) node.Arrival {
		return node.Arrival{Source: node.SourceBus, Payload: []byte(payload), MessageID: "m-1", Key: key}
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", what)
		} else if len(err.Error()) > 1024 {
			t.Errorf("%s: an error of %d bytes: %.200s…", what, len(err.Error()), err)
		}
	}
	_, err := in.Decode(bus(`{"input":"x"}`, long))
	check("a task keyed by a long key", err)
	_, err = in.Decode(bus(`{"input":"x","`+long+`":1}`, "s"))
	check("a task with a long unknown key", err)
	_, err = in.DecodeCancel(bus(`{"session_id":"`+long+`"}`, "s"))
	check("a cancel of a long session_id", err)
	for _, p := range []string{
		`{"session_id":"` + long + `","call":"c","approve":true}`,
		`{"session_id":"s","call":"` + long + `","approve":true}`,
		`{"session_id":"s","call":"c","approve":true,"by":"` + long + `"}`,
		`{"session_id":"s","call":"c","approve":true,"` + long + `":1,"` + long + `":2}`,
	} {
		_, err = in.DecodeApproval(bus(p, "s"))
		check("approval "+p[:40], err)
	}
}

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
	big := `{"input":"` + strings.Repeat("x", 1_048_450-len(`{"input":"`)) // no closing quote: malformed
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(big)})
	k.produce(t, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)})
	if res, ok := waitTaskResult(t, k, session, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task next: %+v (found %v), want it completed", res, ok)
	}
	poisoned := 0
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		if string(m.Key) == session {
			poisoned++
			if got := header(m, node.TruncatedPoisonedKey); got != strconv.Itoa(len(big)) || !strings.HasPrefix(big, string(m.Value)) {
				t.Errorf("poisoned copy: %d bytes of the record's start? %v, header %s=%q, want %d", len(m.Value),
					strings.HasPrefix(big, string(m.Value)), node.TruncatedPoisonedKey, got, len(big))
			}
		}
	})
	if poisoned != 1 {
		t.Errorf("poisoned %d records keyed %s, want the malformed one", poisoned, session)
	}
}

// A task as large as a Java producer sends at its defaults, keyed by its session
// but on another partition than its session's (a producer's own partitioner), is
// forwarded to its session's partition and runs. The forwarded copy adds the
// session's key and headers to the record: over the 1 MiB the node's producer
// sends, the forward failed, and was tried again for ever, holding back the
// session's later messages on that partition. So did a cancellation padded with
// spaces to that size.
func TestNearLimitTaskOnAnotherPartitionRuns(t *testing.T) {
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 1)
	sessions := misplacedSessions("big", 2)
	session, padded := sessions[0], sessions[1]
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(),
		RequiredAcks: kgo.RequireAll, Transport: &kgo.Transport{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head := `{"task_id":"big","input":"echo `
	big := head + strings.Repeat("x", 1_048_480-len(head)-2) + `"}`
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(big)}); err != nil {
		t.Fatal(err)
	}
	head = `{"session_id":"` + padded + `"`
	cancelRec := head + strings.Repeat(" ", 1_048_480-len(head)-1) + `}`
	if err := w.WriteMessages(ctx,
		kgo.Message{Key: []byte(padded), Value: []byte(cancelRec), Headers: []kgo.Header{{Key: "type", Value: []byte(messages.TypeCancelRequested)}}},
		kgo.Message{Key: []byte(padded), Value: []byte(`{"input":"echo after","task_id":"after"}`)},
	); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "big", 40*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task big: %+v (found %v), want it completed", res, ok)
	}
	if res, ok := waitTaskResult(t, k, padded, "after", 20*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task after the padded cancellation: %+v (found %v), want it completed", res, ok)
	}
}

// A record refused for a header it gives (a stored header of 600 kB that names no
// stored task) is poisoned, and its session's next task runs: the reason quoted
// the header whole, and the poisoned copy, the header and the reason, was over
// 1 MiB whatever the payload.
func TestLongHeaderRefusedIsPoisoned(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "longheader-" + time.Now().Format("150405.000000")
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo refused"}`),
			Headers: []kgo.Header{{Key: messages.MetaStored, Value: []byte(strings.Repeat("s", 600_000))}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task next: %+v (found %v), want it completed", res, ok)
	}
}
