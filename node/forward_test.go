package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The tests here produce tasks the way librdkafka clients do by default (kcat,
// confluent-kafka for Python and Go): partitioner consistent_random, CRC32 of the key
// for a keyed record, a random partition for one without a key. Troupe places sessions
// by murmur2, so most of these records land on a partition other than their session's,
// and each must still run, once, on the session's owner.

// forwardPartitions is the partition count of these tests' topics.
const forwardPartitions = 6

// misplacedSessions returns session IDs prefix-<i> whose librdkafka partition (CRC32
// of the key) is not their murmur2 partition, one for each such pair of partitions
// (at most count): whichever nodes own which partitions, some of their records land
// on a partition that another node than their session's owner owns.
func misplacedSessions(prefix string, count int) []string {
	var ids []string
	seen := map[[2]int]bool{}
	for i := 0; len(ids) < min(count, forwardPartitions*(forwardPartitions-1)) && i < 1_000_000; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		pair := [2]int{int(crc32.ChecksumIEEE([]byte(id)) % forwardPartitions), kafka.PartitionOf(id, forwardPartitions)}
		if pair[0] == pair[1] || seen[pair] {
			continue
		}
		seen[pair] = true
		ids = append(ids, id)
	}
	return ids
}

// partitionHeader tells partitionedBalancer where a test record goes.
const partitionHeader = "test-partition"

// partitionedBalancer is librdkafka's default partitioner (consistent_random: CRC32
// of the key), except that a record with a partitionHeader header goes where it says.
func partitionedBalancer() kgo.Balancer {
	return kgo.BalancerFunc(func(m kgo.Message, partitions ...int) int {
		for _, h := range m.Headers {
			if h.Key == partitionHeader {
				p, _ := strconv.Atoi(string(h.Value))
				return partitions[p%len(partitions)]
			}
		}
		return kgo.CRC32Balancer{}.Balance(m, partitions...)
	})
}

// topicResults reads every record of the Troupe topic name (without the prefix) that
// is on the broker now, as TaskResults by session.
func topicResults(t *testing.T, k kafkaEnv) map[string]messages.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := k.topic(messages.TopicResults)
	conn, err := kgo.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	out := map[string]messages.TaskResult{}
	if err != nil {
		return out // not created yet
	}
	for _, p := range parts {
		lc, err := kgo.DialLeader(ctx, "tcp", k.brokers[0], topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := lc.ReadLastOffset()
		lc.Close()
		if notReadyYet(err) {
			continue // a topic just created: its leader is not elected yet; the caller polls again
		}
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			continue
		}
		r := kgo.NewReader(kgo.ReaderConfig{Brokers: k.brokers, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p.ID, err)
			}
			var res messages.TaskResult
			if err := json.Unmarshal(m.Value, &res); err != nil {
				r.Close()
				t.Fatalf("result %s: %v", m.Value, err)
			}
			out[res.SessionID] = res
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// waitResults polls troupe.results until done accepts what it holds.
func waitResults(t *testing.T, k kafkaEnv, within time.Duration, what string, done func(map[string]messages.TaskResult) bool) map[string]messages.TaskResult {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		res := topicResults(t, k)
		if done(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("troupe.results: %s not there within %s; results: %v", what, within, res)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// byOutput returns the results whose output is one of outputs, by output.
func byOutput(res map[string]messages.TaskResult, outputs []string) map[string]messages.TaskResult {
	want := map[string]bool{}
	for _, o := range outputs {
		want[o] = true
	}
	found := map[string]messages.TaskResult{}
	for _, r := range res {
		if want[r.Output] {
			found[r.Output] = r
		}
	}
	return found
}

// countEvents returns how many events of type typ a session's log holds.
func countEvents(t *testing.T, c *testCluster, session string, typ messages.Type) int {
	t.Helper()
	events, err := c.log.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// waitOwners starts count cluster nodes and waits until each owns a partition.
func waitOwners(t *testing.T, c *testCluster, count int) []*node.Node {
	t.Helper()
	var nodes []*node.Node
	for i := range count {
		n, _ := clusterNode(t, c.k, c.group, c.log, fmt.Sprintf("n%d", i), 0, nil, nil)
		nodes = append(nodes, n)
	}
	waitFor(t, 60*time.Second, "every node owning partitions", func() bool {
		total := 0
		for _, n := range nodes {
			if n.PartitionsOwned() == 0 {
				return false
			}
			total += n.PartitionsOwned()
		}
		return total == forwardPartitions
	})
	return nodes
}

// TestClusterRunsTasksOnAnyPartition produces tasks the way librdkafka does by default
// on a two-node cluster: keyed records on their CRC32 partition (not their session's),
// a record keyed by one session naming another in its body, records without a key
// (with a session_id, and without one) on every partition, and one record twice with
// one message ID on two wrong partitions. Every task runs to its result, once.
func TestClusterRunsTasksOnAnyPartition(t *testing.T) {
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 2)
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(),
		RequiredAcks: kgo.RequireAll, Transport: &kgo.Transport{}}
	defer w.Close()

	keyed := misplacedSessions("crc", 30)
	var recs []kgo.Message
	for _, id := range keyed {
		recs = append(recs, kgo.Message{Key: []byte(id), Value: []byte(`{"input":"echo keyed ` + id + `"}`)})
	}
	// Keyed by one session, for another: the body's session_id wins.
	body := misplacedSessions("body", 1)[0]
	recs = append(recs, kgo.Message{Key: []byte(body), Value: []byte(`{"input":"echo body","session_id":"` + body + `-x"}`)})
	// No key, one on each partition: with a session_id, and without one (the node
	// names the session after the record).
	named := misplacedSessions("nokey", forwardPartitions)
	var anonymous []string
	for p := range forwardPartitions {
		h := []kgo.Header{{Key: partitionHeader, Value: []byte(strconv.Itoa(p))}}
		recs = append(recs,
			kgo.Message{Headers: h, Value: []byte(`{"input":"echo named ` + named[p] + `","session_id":"` + named[p] + `"}`)},
			kgo.Message{Headers: h, Value: []byte(fmt.Sprintf(`{"input":"echo anonymous %d"}`, p))})
		anonymous = append(anonymous, fmt.Sprintf("anonymous %d", p))
	}
	// One task written twice with one message ID (a producer's retry), on two
	// partitions that are not its session's: it runs once.
	dup := misplacedSessions("dup", 1)[0]
	right := kafka.PartitionOf(dup, forwardPartitions)
	for _, p := range []int{(right + 1) % forwardPartitions, (right + 4) % forwardPartitions} {
		recs = append(recs, kgo.Message{Key: []byte(dup), Value: []byte(`{"input":"echo dup"}`),
			Headers: []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte("dup-task-" + dup)}, {Key: partitionHeader, Value: []byte(strconv.Itoa(p))}}})
	}
	k.waitTopic(t, messages.TopicTasks)
	writeAll(t, w, recs)

	want := map[string]string{dup: "dup", body + "-x": "body"}
	for _, id := range keyed {
		want[id] = "keyed " + id
	}
	for _, id := range named {
		want[id] = "named " + id
	}
	res := waitResults(t, k, 60*time.Second, "every task's result", func(res map[string]messages.TaskResult) bool {
		for id := range want {
			if _, ok := res[id]; !ok {
				return false
			}
		}
		return len(byOutput(res, anonymous)) == len(anonymous)
	})
	for id, out := range want {
		if r := res[id]; r.Status != messages.StatusCompleted || r.Output != out {
			t.Errorf("session %s: %+v, want completed with %q", id, r, out)
		}
	}
	for out, r := range byOutput(res, anonymous) {
		if r.Status != messages.StatusCompleted || !strings.HasPrefix(r.SessionID, "task.") {
			t.Errorf("task %q without a key or session: %+v", out, r)
		}
	}
	if _, ok := res[body]; ok {
		t.Errorf("the record keyed %s ran in its key's session, not its body's", body)
	}
	if n := countEvents(t, c, dup, messages.TypeTaskSubmitted); n != 1 {
		t.Errorf("session %s recorded %d tasks for one message ID, want 1", dup, n)
	}
}

// kcatProduce runs kcat as a producer, with its default partitioner, and the
// extra arguments (-k KEY, -K DELIM), one record per line.
func kcatProduce(t *testing.T, kcat string, k kafkaEnv, extra []string, lines ...string) {
	t.Helper()
	args := append([]string{"-b", strings.Join(k.brokers, ","), "-P", "-t", k.topic(messages.TopicTasks)}, extra...)
	cmd := exec.Command(kcat, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// kcatResults reads troupe.results with kcat, by session.
func kcatResults(t *testing.T, kcat string, k kafkaEnv) map[string]messages.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-b", strings.Join(k.brokers, ","), "-C", "-t", k.topic(messages.TopicResults),
		"-o", "beginning", "-e", "-q", "-f", "%s\n").Output()
	res := map[string]messages.TaskResult{}
	if err != nil {
		return res // the topic may not exist yet
	}
	for _, line := range strings.Split(string(out), "\n") {
		var r messages.TaskResult
		if line != "" && json.Unmarshal([]byte(line), &r) == nil {
			res[r.SessionID] = r
		}
	}
	return res
}

// TestKcatDefaultPartitionerOnThreeNodes is the user's repro: `kcat -P -k s-1` with
// kcat's default partitioner (no -X partitioner=murmur2_random) on three nodes, for
// sessions whose CRC32 partition is not their murmur2 one, and a task without a key;
// kcat reads each result from troupe.results.
func TestKcatDefaultPartitionerOnThreeNodes(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (.ci/run installs it from Debian's kcat package)")
	}
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 3)
	sessions := misplacedSessions("s", 30)
	// The user's command for the first session, then one kcat for the others.
	kcatProduce(t, kcat, k, []string{"-k", sessions[0]}, `{"input":"What is 2*3?"}`)
	var lines []string
	for _, id := range sessions[1:] {
		lines = append(lines, id+`|{"input":"What is 2*3?"}`)
	}
	kcatProduce(t, kcat, k, []string{"-K", "|"}, lines...)
	kcatProduce(t, kcat, k, nil, `{"input":"echo from kcat without a key"}`)
	deadline := time.Now().Add(90 * time.Second)
	for {
		res := kcatResults(t, kcat, k)
		done := len(byOutput(res, []string{"from kcat without a key"})) == 1
		for _, id := range sessions {
			_, ok := res[id]
			done = done && ok
		}
		if done {
			for _, id := range sessions {
				if r := res[id]; r.Status != messages.StatusCompleted || r.Output != "6" {
					t.Errorf("session %s: %+v, want completed with 6", id, r)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("results of kcat's tasks not on troupe.results within 90 s; results: %v", res)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// testPython returns a Python that has confluent-kafka: TROUPE_TEST_PYTHON (.ci/run
// points it at a venv it makes), else python3; it skips the test without one.
func testPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("TROUPE_TEST_PYTHON")
	if py == "" {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import confluent_kafka (.ci/run sets TROUPE_TEST_PYTHON to a venv with it): %v %s", py, err, strings.TrimSpace(string(out)))
	}
	return py
}

// TestConfluentKafkaPythonProducerOnThreeNodes produces tasks with PyPI's
// confluent-kafka Producer in its default settings (librdkafka's consistent_random
// partitioner) on three nodes, keyed and without a key, and reads their results from
// troupe.results.
func TestConfluentKafkaPythonProducerOnThreeNodes(t *testing.T) {
	py := testPython(t)
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 3)
	sessions := misplacedSessions("py", 30)
	var lines []string
	for _, id := range sessions {
		lines = append(lines, id+"|"+`{"input":"echo python `+id+`"}`)
	}
	lines = append(lines, `|{"input":"echo python without a key"}`)
	script, err := filepath.Abs(filepath.Join("testdata", "produce.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, strings.Join(k.brokers, ","), k.topic(messages.TopicTasks))
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("confluent-kafka producer: %v\n%s", err, out)
	}
	res := waitResults(t, k, 90*time.Second, "the results of the Python producer's tasks", func(res map[string]messages.TaskResult) bool {
		for _, id := range sessions {
			if _, ok := res[id]; !ok {
				return false
			}
		}
		return len(byOutput(res, []string{"python without a key"})) == 1
	})
	for _, id := range sessions {
		if r := res[id]; r.Status != messages.StatusCompleted || r.Output != "python "+id {
			t.Errorf("session %s: %+v", id, r)
		}
	}
}

// partitionsOf returns the partitions of the Troupe topic name (without the prefix)
// that each member of the consumer group owns now.
func partitionsOf(t *testing.T, k kafkaEnv, group, name string) [][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := &kgo.Client{Addr: kgo.TCP(k.brokers...), Transport: &kgo.Transport{}}
	resp, err := cl.DescribeGroups(ctx, &kgo.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		t.Fatal(err)
	}
	var owned [][]int
	for _, g := range resp.Groups {
		if g.Error != nil {
			t.Fatalf("describe group %s: %v", group, g.Error)
		}
		for _, m := range g.Members {
			var ps []int
			for _, tp := range m.MemberAssignments.Topics {
				if tp.Topic == k.topic(name) {
					ps = append(ps, tp.Partitions...)
				}
			}
			owned = append(owned, ps)
		}
	}
	return owned
}

// TestClusterCancelOnAnyPartition cancels a running session with a cancellation that
// a Kafka client wrote (header type: task.cancel) to a partition owned by the node
// that does not run the session: it reaches the session's owner.
func TestClusterCancelOnAnyPartition(t *testing.T) {
	c := newTestCluster(t, time.Minute)
	k := c.k
	a, _ := c.node("a", 0)
	bn, _ := c.node("b", 0)
	waitFor(t, 60*time.Second, "both nodes owning partitions", func() bool {
		return a.PartitionsOwned() > 0 && bn.PartitionsOwned() > 0 && a.PartitionsOwned()+bn.PartitionsOwned() == forwardPartitions
	})
	session := submitTasks(t, a, "cancel-any", 1)[0]
	waitFor(t, 60*time.Second, "the session calling its tool", func() bool {
		c.led.mu.Lock()
		defer c.led.mu.Unlock()
		return len(c.led.calls) == 1
	})
	// A partition of the node that does not own the session's.
	right, wrong := kafka.PartitionOf(session, forwardPartitions), -1
	for _, ps := range partitionsOf(t, k, c.group, messages.TopicTasks) {
		if len(ps) > 0 && !slices.Contains(ps, right) {
			wrong = ps[0]
		}
	}
	if wrong < 0 {
		t.Fatalf("no member of group %s owns a partition without %d", c.group, right)
	}
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(),
		RequiredAcks: kgo.RequireAll, Transport: &kgo.Transport{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session),
		Value: []byte(`{"session_id":"` + session + `","reason":"cancelled from another client"}`),
		Headers: []kgo.Header{
			{Key: messages.MetaType, Value: []byte(messages.TypeCancelRequested)},
			{Key: partitionHeader, Value: []byte(strconv.Itoa(wrong))},
		}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "session "+session+" cancelled", func() bool {
		st, ok, err := a.Status(context.Background(), session)
		return err == nil && ok && st.Status == messages.StatusFailed && strings.Contains(st.Error, "cancelled from another client")
	})
}

// notReadyYet reports whether err is a retriable broker error, such as a leader not
// yet elected on a topic just created.
func notReadyYet(err error) bool {
	var ke kgo.Error
	return errors.As(err, &ke) && ke.Temporary()
}

// writeAll writes recs, writing again only those the broker refused with a
// retriable error (a leader not yet elected on a topic just created): a record
// refused was not written, so none is written twice.
func writeAll(t *testing.T, w *kgo.Writer, recs []kgo.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for attempt := 0; len(recs) > 0; attempt++ {
		err := w.WriteMessages(ctx, recs...)
		if err == nil {
			return
		}
		var werrs kgo.WriteErrors
		if !errors.As(err, &werrs) || attempt == 20 {
			t.Fatal(err)
		}
		var again []kgo.Message
		for i, e := range werrs {
			if e == nil {
				continue
			}
			var ke kgo.Error
			if !errors.As(e, &ke) || !ke.Temporary() {
				t.Fatalf("record %d: %v", i, e)
			}
			again = append(again, recs[i])
		}
		recs = again
		time.Sleep(200 * time.Millisecond)
	}
}
