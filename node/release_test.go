package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The hand-over of partitions between owners: one that gives them up cleanly
// (a rebalance it lives through, a clean Close) records it in the log once the
// bus has every event it appended for them, and their next owner publishes
// nothing of their ended sessions again; one that did not (killed, fenced) leaves
// them to be published again, so that no result is lost.

// metricValue is the value of the node's counter or gauge name (0 if unset).
func metricValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	families, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// recordsByKey counts the records of topic by key (eachRecord).
func recordsByKey(t *testing.T, k kafkaEnv, name string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	eachRecord(t, k, name, func(m kgo.Message) { counts[string(m.Key)]++ })
	return counts
}

// runToTheEnd runs count tasks on n, one session each, and waits until each
// session's result is on troupe.results, once.
func runToTheEnd(t *testing.T, k kafkaEnv, n *node.Node, prefix string, count int) []string {
	t.Helper()
	base := fmt.Sprintf("%s-%d-", prefix, time.Now().UnixNano())
	var sessions []string
	for i := range count {
		s := fmt.Sprintf("%s%d", base, i)
		sessions = append(sessions, s)
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 6 * 7?", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, n, sessions, 60*time.Second)
	waitFor(t, 60*time.Second, "each session's result on troupe.results", func() bool {
		counts := recordsByKey(t, k, messages.TopicResults)
		for _, s := range sessions {
			if counts[s] != 1 {
				return false
			}
		}
		return true
	})
	return sessions
}

// probeEveryPartition runs a task in a session of each of the 6 partitions, and
// waits for their results on troupe.results. Each owner's outbox publishes in
// order: once the probe of a partition is out, so is everything its owner handed
// to the outbox before (a resumption's republished results among it).
func probeEveryPartition(t *testing.T, k kafkaEnv, n *node.Node) {
	t.Helper()
	probes := map[int]string{}
	for i := 0; len(probes) < 6; i++ {
		s := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), i)
		if p := kafka.PartitionOf(s, 6); probes[p] == "" {
			probes[p] = s
		}
	}
	var ids []string
	for _, s := range probes {
		ids = append(ids, s)
		if _, err := n.Submit(context.Background(), node.Task{Input: "What is 2 + 2?", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, n, ids, 60*time.Second)
	waitFor(t, 60*time.Second, "the probes' results on troupe.results", func() bool {
		counts := recordsByKey(t, k, messages.TopicResults)
		for _, s := range ids {
			if counts[s] == 0 {
				return false
			}
		}
		return true
	})
}

// wantResults fails unless each session has want records on troupe.results.
func wantResults(t *testing.T, k kafkaEnv, sessions []string, want int) {
	t.Helper()
	counts := recordsByKey(t, k, messages.TopicResults)
	for _, s := range sessions {
		if counts[s] != want {
			t.Errorf("session %s has %d results on troupe.results; want %d", s, counts[s], want)
		}
	}
}

// A node that joins takes half the partitions of a node that ran their sessions
// to their end and hands them over cleanly (it lives through the rebalance): the
// newcomer publishes none of their results again. Before, every takeover
// republished the latest task of every session that ended in the last ten
// minutes: a chaos run put 9,862 records on troupe.results for 2,873 tasks.
func TestCleanHandOverPublishesNothingAgain(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	a, _ := clusterNode(t, k, group, log, "a", 0, nil, nil)
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool { return a.PartitionsOwned() == 6 })
	sessions := runToTheEnd(t, k, a, "handover", 12)

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil)
	waitFor(t, 90*time.Second, "the partitions shared, and node b's resumed", func() bool {
		return a.PartitionsOwned() > 0 && b.PartitionsOwned() > 0 && a.PartitionsOwned()+b.PartitionsOwned() == 6 &&
			metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	if got := metricValue(t, a, "troupe_cluster_partitions_released_total"); got < 6 {
		t.Errorf("node a released %v partitions cleanly; want its 6", got)
	}
	probeEveryPartition(t, k, a)
	wantResults(t, k, sessions, 1)
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != 0 {
		t.Errorf("node b republished %v ended sessions; want none", got)
	}

	// A second task on each session: the node that starts a session's actor for
	// it publishes only the new task's result, not the first one's again.
	for _, s := range sessions {
		if _, err := a.Submit(context.Background(), node.Task{Input: "What is 7 * 7?", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "each session's second result on troupe.results", func() bool {
		counts := recordsByKey(t, k, messages.TopicResults)
		for _, s := range sessions {
			if counts[s] < 2 {
				return false
			}
		}
		return true
	})
	probeEveryPartition(t, k, a)
	wantResults(t, k, sessions, 2)
}

// A node that closes cleanly marks its partitions released before it leaves the
// group; the node that takes them all publishes nothing again.
func TestCleanCloseHandsOverPublishingNothingAgain(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	a, closeA := clusterNode(t, k, group, log, "a", 0, nil, nil)
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool { return a.PartitionsOwned() == 6 })
	sessions := runToTheEnd(t, k, a, "closed", 8)
	closeA()

	owners, err := log.(eventlog.Releasing).Owners(context.Background(), []int{0, 1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	for p := range 6 {
		if o := owners[p]; o.Node != "a" || o.ReleasedUS == 0 {
			t.Errorf("partition %d after node a closed: %+v; want released by a", p, o)
		}
	}

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil)
	waitFor(t, 90*time.Second, "node b owns every partition and resumed them", func() bool {
		return b.PartitionsOwned() == 6 && metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, sessions, 1)
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != 0 {
		t.Errorf("node b republished %v ended sessions; want none", got)
	}
}

// An owner that took the partitions and never released them (killed, or fenced,
// maybe between appending a session's last events and publishing them) leaves
// them to be published again: the next owner looks for the latest task of each
// session that ended lately on the bus, and would republish it if it were not
// there, so that no result is lost (TestTakeOverPublishesNothingAgainOfWhatTheBusHolds).
// Here everything is: before, each result reached troupe.results twice.
func TestUncleanHandOverPublishesAgain(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	a, closeA := clusterNode(t, k, group, log, "a", 0, nil, nil)
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool { return a.PartitionsOwned() == 6 })
	sessions := runToTheEnd(t, k, a, "crashed", 8)
	closeA()
	// Another node took the partitions after a, and died without a release.
	if _, err := log.(eventlog.Fencing).Own(context.Background(), "killed", []int{0, 1, 2, 3, 4, 5}); err != nil {
		t.Fatal(err)
	}

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil)
	waitFor(t, 90*time.Second, "node b owns every partition and resumed them", func() bool {
		return b.PartitionsOwned() == 6 && metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, sessions, 1)
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_found_on_bus_total"); got != float64(len(sessions)) {
		t.Errorf("node b found %v ended sessions on the bus; want %d", got, len(sessions))
	}
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != 0 {
		t.Errorf("node b republished %v ended sessions; want none", got)
	}
}

// unreleasingLog is a shared log whose Release records nothing: its node hands
// its partitions over as one killed before it released them does.
type unreleasingLog struct{ *sqlite.Log }

func (unreleasingLog) Release(context.Context, string, uint64, []int, int64) error { return nil }

// shiftedClock is the wall clock moved by shift: a test runs a node's next
// sessions later, on its clock, without waiting.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

// An owner killed before it released its partitions leaves its last publication
// mark (Config.PublishMarkInterval): the next owner publishes again only the
// sessions that ended at or after it, not those of the last ten minutes, and a
// session started later publishes nothing of its earlier tasks again. Sessions
// that ended after the mark are published again: what the owner may have
// appended and never published is not lost. (The clock the test moves stamps
// the events, not the records on the bus, so the next owner does not find these
// results on troupe.results (onbus.go) and publishes them all again.) Before marks, the chaos run left
// 1.53 result records per task on troupe.results.
func TestMarkedUncleanHandOverPublishesOnlyAfterTheMark(t *testing.T) {
	log := sharedLog(t)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	clock := &shiftedClock{}
	a, closeA := clusterNode(t, k, group, unreleasingLog{log.(*sqlite.Log)}, "a", 0, nil, nil, func(c *node.Config) {
		c.Clock = clock
		c.PublishMarkInterval = -1 // marked by the test (MarkPublishedNow)
	})
	waitFor(t, 60*time.Second, "node a owns every partition and resumed them", func() bool {
		return a.PartitionsOwned() == 6 && metricValue(t, a, "troupe_cluster_resumptions_total") >= 1
	})
	early := runToTheEnd(t, k, a, "early", 8)
	// The mark is taken a minute after they ended, on a's clock (past the margin
	// for the clock's steps), and the next sessions run after it.
	clock.shift.Store(int64(time.Minute))
	if !a.MarkPublishedNow() {
		t.Fatal("node a recorded no publication mark")
	}
	if a.MarkPublishedNow() {
		t.Error("node a marked again with nothing appended since")
	}
	clock.shift.Store(int64(2 * time.Minute))
	late := runToTheEnd(t, k, a, "late", 4)
	closeA() // without a release, as if killed

	owners, err := log.(eventlog.Releasing).Owners(context.Background(), []int{0, 1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	for p := range 6 {
		if o := owners[p]; o.Node != "a" || o.ReleasedUS != 0 || o.PublishedUS == 0 {
			t.Errorf("partition %d after node a died: %+v; want marked by a, not released", p, o)
		}
	}

	b, _ := clusterNode(t, k, group, log, "b", 0, nil, nil)
	waitFor(t, 90*time.Second, "node b owns every partition and resumed them", func() bool {
		return b.PartitionsOwned() == 6 && metricValue(t, b, "troupe_cluster_resumptions_total") >= 1
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, early, 1)
	wantResults(t, k, late, 2)
	if got := metricValue(t, b, "troupe_cluster_ended_sessions_republished_total"); got != float64(len(late)) {
		t.Errorf("node b republished %v ended sessions; want the %d that ended after the mark", got, len(late))
	}

	// A second task on each early session: the node that starts its actor for it
	// publishes only the new task's result, not the first one's again.
	for _, s := range early {
		if _, err := b.Submit(context.Background(), node.Task{Input: "What is 7 * 7?", SessionID: s}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "each early session's second result on troupe.results", func() bool {
		counts := recordsByKey(t, k, messages.TopicResults)
		for _, s := range early {
			if counts[s] < 2 {
				return false
			}
		}
		return true
	})
	probeEveryPartition(t, k, b)
	wantResults(t, k, early, 2)
}
