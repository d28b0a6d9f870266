package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// TestClusterTasksPartitionsAddedUnderLoad scales a cluster the way a user does
// once its nodes outnumber the partitions of troupe.tasks: partitions are added to
// the topic while two nodes work through tasks queued with kcat (its default
// partitioner), and kcat publishes more once the group took the new partitions. A
// session's partition changes with the count (murmur2 of its ID modulo the count)
// for about half the sessions, so their tasks sit on their old partition (or, not
// forwarded yet, on the one kcat placed them on) and, published later, on their
// new one. No task may be lost or run twice, every side effect happens once, the
// tasks published after the change run in the order published, and no session
// has two writers at once (one event at each seq, none shadowed). The tasks
// queued before the change may run out of order (README, "Adding partitions"):
// the test counts the sessions they were.
func TestClusterTasksPartitionsAddedUnderLoad(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	t.Setenv("TROUPE_MODEL_DELAY", "30ms")
	const sessions, before, after = 24, 12, 3

	n1 := startClusterNode(t, env, "n1", "all", script, records, modelLog, "-v")
	n2 := startClusterNode(t, env, "n2", "all", script, records, modelLog, "-v")
	waitOwned(t, n1, n2)
	total := n1.gauge(t, "troupe_cluster_partitions_total")

	prefix := fmt.Sprintf("gp-%d-", time.Now().UnixNano())
	var ids []string
	for s := range sessions {
		ids = append(ids, fmt.Sprintf("%ss%02d", prefix, s))
	}
	inputs := map[string][]string{}
	publish := func(count int) {
		var lines []string
		for range count {
			for _, id := range ids {
				in := fmt.Sprintf("%s t%02d", id, len(inputs[id]))
				inputs[id] = append(inputs[id], in)
				lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
			}
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	publish(before)

	log := env.openLog(t)
	defer log.Close()
	if !waitTasksEnded(t, log, map[string]int{ids[0]: 1}, 120*time.Second) {
		t.FailNow()
	}
	topic := env.prefix + messages.TopicTasks
	client := &kgo.Client{Addr: kgo.TCP(env.brokers), Timeout: 10 * time.Second}
	res, err := client.CreatePartitions(context.Background(), &kgo.CreatePartitionsRequest{
		Topics: []kgo.TopicPartitionsConfig{{Name: topic, Count: int32(2 * total)}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	waitFor(t, 90*time.Second, "the group to take the new partitions", func() bool {
		return n1.gauge(t, "troupe_cluster_partitions_total") == 2*total && n2.gauge(t, "troupe_cluster_partitions_total") == 2*total &&
			n1.gauge(t, "troupe_cluster_partitions_owned")+n2.gauge(t, "troupe_cluster_partitions_owned") == 2*total
	})
	unfinished := 0
	for _, id := range ids {
		evs, err := log.Read(t.Context(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, ended, _ := tasksOf(t, evs); len(ended) < before {
			unfinished++
		}
	}
	publish(after)
	if unfinished == 0 {
		t.Fatal("every task published before the partitions were added ended before the group took them; the test proves nothing")
	}

	want := map[string]int{}
	all := 0
	for _, id := range ids {
		want[id] = len(inputs[id])
		all += len(inputs[id])
	}
	if !waitTasksEnded(t, log, want, 240*time.Second) {
		t.FailNow()
	}
	reordered := 0
	for _, id := range ids {
		evs, err := log.Read(t.Context(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := taskInputs(t, evs)
		if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, inputs[id]) {
			t.Errorf("session %s recorded the tasks %v, want each of %v once", id, got, inputs[id])
			continue
		}
		if !slices.Equal(got, inputs[id]) {
			reordered++
		}
		late := inputs[id][before:]
		if got := slices.DeleteFunc(slices.Clone(got), func(in string) bool { return !slices.Contains(late, in) }); !slices.Equal(got, late) {
			t.Errorf("session %s ran the tasks published after the partitions were added in the order %v, want %v", id, got, late)
		}
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, all)
	assertGapFree(t, log, ids)
	assertOneEventPerSeq(t, env, prefix)
	assertNothingShadowed(t, clickhouseConn(t, env), log, prefix)
	t.Logf("tasks %d over %d sessions, %d sessions unfinished as the group took %d partitions more; %d sessions ran the tasks queued before out of order",
		all, len(ids), unfinished, total, reordered)
}
