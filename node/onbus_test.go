package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// droppingPublisher publishes what its node hands it, except the result of
// session noResult on troupe.results and the task.completed event of session
// noEvent on troupe.events: what an owner killed in the middle of publishing a
// batch may leave out (the outbox publishes a batch's topics at once).
type droppingPublisher struct {
	message.Publisher
	noResult, noEvent string
}

func (p droppingPublisher) Publish(topic string, msgs ...*message.Message) error {
	kept := make([]*message.Message, 0, len(msgs))
	for _, m := range msgs {
		s := m.Metadata.Get(messages.MetaSessionID)
		if topic == messages.TopicResults && s == p.noResult ||
			topic == messages.TopicEvents && s == p.noEvent && m.Metadata.Get(messages.MetaType) == string(messages.TypeTaskCompleted) {
			continue
		}
		kept = append(kept, m)
	}
	return p.Publisher.Publish(topic, kept...)
}

// An owner killed (unreleased) before its next publication mark had published
// most of what its sessions appended since its last one: the node that takes its
// partitions over reads troupe.results and troupe.events, and publishes none of
// those sessions' results again. Before, every session that ended after the mark
// reached troupe.results twice (the chaos run: 50 of 3,136 results). What the
// owner did not publish is still published: a result that never reached
// troupe.results, and a session whose last event did not reach troupe.events
// (published again whole, its result twice: a duplicate rather than a loss), and
// a task with a reply topic, whose copy there nobody looked for.
func TestTakeOverPublishesNothingAgainOfWhatTheBusHolds(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	suffix := time.Now().Format("150405.000000")
	noResult, noEvent := "no-result-"+suffix, "no-event-"+suffix
	a, closeA := clusterNode(t, k, group, unreleasingLog{log.(*sqlite.Log)}, "a", 0, nil, nil, func(c *node.Config) {
		c.PublishMarkInterval = -1 // marked by the test (MarkPublishedNow)
		c.Bus.Publisher = droppingPublisher{Publisher: c.Bus.Publisher, noResult: noResult, noEvent: noEvent}
	})
	waitFor(t, 60*time.Second, "node a owns every partition and resumed them", func() bool {
		return a.PartitionsOwned() == 6 && metricValue(t, a, "troupe_cluster_resumptions_total") >= 1
	})
	if !a.MarkPublishedNow() {
		t.Fatal("node a recorded no publication mark")
	}
	replied, replyTopic := "replied-"+suffix, "replies-"+suffix
	for _, s := range []string{noResult, noEvent, replied} {
		task := node.Task{Input: "What is 6 * 7?", SessionID: s}
		if s == replied {
			task.ReplyTopic = replyTopic
		}
		if _, err := a.Submit(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, a, []string{noResult, noEvent, replied}, 60*time.Second)
	// Once these are on troupe.results, so is everything a's outbox was handed
	// before them (it publishes in order).
	done := runToTheEnd(t, k, a, "done", 8)
	closeA() // without a release, and before its next mark, as if killed

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil)
	waitFor(t, 90*time.Second, "node b owns every partition and resumed them", func() bool {
		return b.PartitionsOwned() == 6 && metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, done, 1)
	wantResults(t, k, []string{noResult}, 1)
	wantResults(t, k, []string{noEvent, replied}, 2)
	replies := 0
	eachRecord(t, k, replyTopic, func(m kgo.Message) {
		if string(m.Key) == replied {
			replies++
		}
	})
	if replies != 2 {
		t.Errorf("session %s's result is %d times on its reply topic; want twice (published again)", replied, replies)
	}
	completed := 0
	eachRecord(t, k, messages.TopicEvents, func(m kgo.Message) {
		var e messages.Envelope
		if string(m.Key) == noEvent && json.Unmarshal(m.Value, &e) == nil && e.Type == messages.TypeTaskCompleted {
			completed++
		}
	})
	if completed != 1 {
		t.Errorf("session %s's task.completed is %d times on troupe.events; want once, published by node b", noEvent, completed)
	}
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_found_on_bus_total"); got != float64(len(done)+1) {
		t.Errorf("node b found %v ended sessions on the bus; want %d: %d it publishes nothing of again, and %s", got, len(done)+1, len(done), replied)
	}
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != 2 {
		t.Errorf("node b republished %v ended sessions; want 2 (%s, %s)", got, noResult, noEvent)
	}
}

// failingFinder is a bus publisher that cannot read what its topics hold.
type failingFinder struct{ message.Publisher }

func (failingFinder) FindRecords(context.Context, string, []string, time.Time, func(string, string, []byte)) error {
	return errors.New("the broker does not answer")
}

var _ node.RecordFinder = failingFinder{}

// A node taking partitions over that cannot read the bus publishes again every
// session that ended lately, as if it had found none of them there: duplicates,
// never a lost result.
func TestTakeOverThatCannotReadTheBusPublishesAgain(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	a, closeA := clusterNode(t, k, group, unreleasingLog{log.(*sqlite.Log)}, "a", 0, nil, nil, func(c *node.Config) {
		c.PublishMarkInterval = -1 // never marked: every session that ended lately is looked for
	})
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool { return a.PartitionsOwned() == 6 })
	done := runToTheEnd(t, k, a, "done", 4)
	closeA()

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil, func(c *node.Config) {
		c.Bus.Publisher = failingFinder{c.Bus.Publisher}
	})
	waitFor(t, 90*time.Second, "node b owns every partition and resumed them", func() bool {
		return b.PartitionsOwned() == 6 && metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, done, 2)
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != float64(len(done)) {
		t.Errorf("node b republished %v ended sessions; want %d", got, len(done))
	}
}
