package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// topicRecords returns the records of topic keyed key, from every partition's start
// up to its end offset as the broker reports it now.
func topicRecords(t *testing.T, k kafkaEnv, name, key string) []kgo.Message {
	t.Helper()
	var out []kgo.Message
	eachRecord(t, k, name, func(m kgo.Message) {
		if string(m.Key) == key {
			out = append(out, m)
		}
	})
	return out
}

// endOffset returns the end offset of partition p of topic name. A broker that
// has just created the topic answers "not leader for partition" until the
// partition's leader is elected (Kafka does, kfake does not): it is asked again
// until ctx ends.
func endOffset(ctx context.Context, t *testing.T, k kafkaEnv, name string, p int) int64 {
	t.Helper()
	for {
		pc, err := kgo.DialLeader(ctx, "tcp", k.brokers[0], k.topic(name), p)
		if err == nil {
			var end int64
			end, err = pc.ReadLastOffset()
			pc.Close()
			if err == nil {
				return end
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("end offset of partition %d of %s: %v", p, name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// eachRecord calls f with each record of topic, reading every partition from its
// start up to its end offset as the broker reports it now: no read waits for a
// timeout to tell the end, so a slow broker misses nothing. A topic not created
// yet has no records.
func eachRecord(t *testing.T, k kafkaEnv, name string, f func(kgo.Message)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := kgo.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(k.topic(name))
	conn.Close()
	if err != nil {
		return
	}
	for _, p := range parts {
		end := endOffset(ctx, t, k, name, p.ID)
		if end == 0 {
			continue
		}
		r := kgo.NewReader(kgo.ReaderConfig{Brokers: k.brokers, Topic: k.topic(name), Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("partition %d of %s, before offset %d: %v", p.ID, name, end, err)
			}
			f(m)
			if m.Offset+1 >= end {
				break
			}
		}
		r.Close()
	}
}

// A session whose last events its owner appended and never published (the owner was
// killed between the two, or fenced after its write landed) gets them published by
// the node that takes its partition over: the log is the only place left that has
// them. Here the events are written by a node that is on no Kafka bus at all; a
// sharded node assigned the partitions afterwards publishes the session's latest
// task, events and result, on troupe.events and troupe.results.
func TestTakeoverPublishesWhatThePreviousOwnerDidNot(t *testing.T) {
	log := sharedLog(t)
	session := "unpublished-" + time.Now().Format("150405.000000")
	first := nodetest.Start(t, node.Config{Log: log})
	nodetest.Run(t, first, session, "What is 6 * 7?")
	events := nodetest.Run(t, first, session, "What is 2 + 2?")
	latest := 0
	for i, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			latest = i
		}
	}
	if latest == 0 || events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the session's %d events end with %s", len(events), events[len(events)-1].Type)
	}

	k := newKafkaEnv(t)
	n, _ := clusterNode(t, k, uniqueGroup(t), log, "taker", 0, nil, nil)
	waitFor(t, 60*time.Second, "the node owns every partition", func() bool { return n.PartitionsOwned() == 6 })

	var published map[string]bool
	waitFor(t, 60*time.Second, "the latest task's events on troupe.events", func() bool {
		published = map[string]bool{}
		for _, m := range topicRecords(t, k, messages.TopicEvents, session) {
			var e messages.Envelope
			if err := json.Unmarshal(m.Value, &e); err == nil {
				published[e.ID] = true
			}
		}
		for _, e := range events[latest:] {
			if !published[e.ID] {
				return false
			}
		}
		return true
	})
	for _, e := range events[:latest] {
		if published[e.ID] {
			t.Errorf("an event of the earlier task was published again: seq %d %s", e.Seq, e.Type)
		}
	}
	res := readResult(t, k, session)
	if res.Status != messages.StatusCompleted || res.Output != "4" {
		t.Fatalf("the result on troupe.results: %+v", res)
	}
}

// A rebalance that gives a node back partitions it held publishes nothing again of
// the sessions it ran and published itself: before, every rebalance republished the
// latest task of every session of the last ten minutes (the chaos run counted 13
// results per session). What another owner left unpublished is still published
// (TestTakeoverPublishesWhatThePreviousOwnerDidNot).
func TestReassignedPartitionsPublishNothingAgain(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	n, _ := clusterNode(t, k, uniqueGroup(t), log, "one", 0, nil, nil)
	waitFor(t, 60*time.Second, "the node owns every partition", func() bool { return n.PartitionsOwned() == 6 })
	suffix := time.Now().Format("150405.000000")
	var sessions []string
	for i := range 4 {
		s := fmt.Sprintf("again-%d-%s", i, suffix)
		sessions = append(sessions, s)
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 6 * 7?", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, n, sessions, 60*time.Second)
	results := func(s string) int { return len(topicRecords(t, k, messages.TopicResults, s)) }
	waitFor(t, 30*time.Second, "each session's result on troupe.results", func() bool {
		for _, s := range sessions {
			if results(s) != 1 {
				return false
			}
		}
		return true
	})

	// The group rebalances and gives the node the same partitions.
	n.Revoked()
	n.Assigned([]int{0, 1, 2, 3, 4, 5}, 6)
	probe := "probe-" + suffix
	if _, err := n.Submit(context.Background(), node.Task{Input: "What is 2 + 2?", SessionID: probe}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, []string{probe}, 60*time.Second)
	// The resumption runs beside the probe, and published within milliseconds
	// what it republished: a while without a second record is none.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range sessions {
			if got := results(s); got != 1 {
				t.Fatalf("session %s has %d results on troupe.results after the rebalance; want 1", s, got)
			}
		}
	}
	// A new task of one of them: its session folds its events again, and publishes
	// its own, not the task before it again.
	again := sessions[0]
	if _, err := n.Submit(context.Background(), node.Task{Input: "What is 3 * 3?", SessionID: again}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the new task's result", func() bool { return results(again) >= 2 })
	evs, err := log.Read(context.Background(), again, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(again); got != 2 {
		t.Errorf("session %s has %d results after its second task; want 2", again, got)
	}
	if got := len(topicRecords(t, k, messages.TopicEvents, again)); got != len(evs) {
		t.Errorf("session %s has %d events on troupe.events for %d in the log", again, got, len(evs))
	}
}
