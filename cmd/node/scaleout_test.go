package main

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/kafka"
)

// TestClusterScaleOutWithKcatTasksQueued grows a cluster the way a user scales one
// out under load: one node runs alone with many tasks queued, published with kcat
// in its default settings (librdkafka's CRC32 partitioner, so most records land on
// a partition other than their session's and are forwarded), and a second and a
// third node join while the tasks run, kcat publishing more as each joins. The
// partitions move twice, each time in a rebalance the nodes live through, which
// hands the sessions over cleanly (calls in flight answer first): so every task
// completes once, in the order published, per session; every side effect happens
// once; and no model or tool call is made twice.
func TestClusterScaleOutWithKcatTasksQueued(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	t.Setenv("TROUPE_MODEL_DELAY", "30ms") // so that the queue takes a while
	const sessions = 12

	n1 := startClusterNode(t, env, "n1", "all", script, records, modelLog, "-v")
	waitOwned(t, n1)

	prefix := fmt.Sprintf("so-%d-", time.Now().UnixNano())
	hot := prefix + "hot"
	ids := []string{hot}
	inputs := map[string][]string{}
	// publish publishes count tasks for the hot session and one for each of the
	// others.
	publish := func(count int) {
		var lines []string
		for range count {
			in := fmt.Sprintf("%s t%02d", hot, len(inputs[hot]))
			inputs[hot] = append(inputs[hot], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, hot, in))
		}
		for s := range sessions {
			id := fmt.Sprintf("%ss%02d", prefix, s)
			if len(inputs[id]) == 0 {
				ids = append(ids, id)
			}
			in := fmt.Sprintf("%s t%02d", id, len(inputs[id]))
			inputs[id] = append(inputs[id], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	publish(20)
	publish(0)

	log := env.openLog(t)
	defer log.Close()
	if !waitTasksEnded(t, log, map[string]int{hot: 3}, 120*time.Second) {
		t.FailNow()
	}
	n2 := startClusterNode(t, env, "n2", "all", script, records, modelLog, "-v")
	publish(10)
	waitOwned(t, n1, n2)
	publish(0)
	n3 := startClusterNode(t, env, "n3", "all", script, records, modelLog, "-v")
	publish(10)
	waitOwned(t, n1, n2, n3)

	want := map[string]int{}
	total := 0
	for _, id := range ids {
		want[id] = len(inputs[id])
		total += len(inputs[id])
	}
	evs, err := log.Read(t.Context(), hot, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ended, _ := tasksOf(t, evs); len(ended) == want[hot] {
		t.Fatal("every queued task ended before the third node joined; the test proves nothing")
	}
	if !waitTasksEnded(t, log, want, 240*time.Second) {
		t.FailNow()
	}
	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, total)
	for what, calls := range map[string]map[string]int{"model": countLines(t, modelLog, ""), "tool": countLines(t, records, "call ")} {
		for key, n := range calls {
			if n != 1 {
				t.Errorf("%s call %s was made %d times; after rebalances the nodes lived through, want once", what, key, n)
			}
		}
	}
	assertGapFree(t, log, ids)
	t.Logf("tasks %d (%d on one session) over %d sessions, all completed once in order while two nodes joined; partitions owned: n1 %d, n2 %d, n3 %d",
		total, want[hot], len(ids), n1.gauge(t, "troupe_cluster_partitions_owned"), n2.gauge(t, "troupe_cluster_partitions_owned"), n3.gauge(t, "troupe_cluster_partitions_owned"))
}

// TestClusterOnlyNodeOfARoleKilled runs a role-split cluster, one node with the
// sessions role and one with the tools and models roles, and kills the only node
// of one role with SIGKILL while calls are in flight, then starts a node of that
// role under a new name, as a user replaces a dead machine. Killed, the tools and
// models node leaves its requests unanswered on their topics, and the sessions node
// waits on them; killed, the sessions node leaves answers addressed to it, which
// nobody reads, and its sessions to the next owner, which asks again with the same
// keys. Either way every session completes, every side effect happens once, and no
// call whose result the log held at the kill is made again.
func TestClusterOnlyNodeOfARoleKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	for _, victimRoles := range []string{"tools,models", "sessions"} {
		t.Run(victimRoles, func(t *testing.T) {
			dir := t.TempDir()
			env := newClusterEnv(t, dir)
			script, records, modelLog := threeRecordsScript(t, dir)
			t.Setenv("TROUPE_MODEL_DELAY", "100ms")
			const sessions = 30
			sessionsNode := startClusterNode(t, env, "s1", "sessions", script, records, modelLog)
			serving := startClusterNode(t, env, "e1", "tools,models", script, records, modelLog)
			waitOwned(t, sessionsNode)
			victim, other, replacementRoles := serving, sessionsNode, "tools,models"
			if victimRoles == "sessions" {
				victim, other, replacementRoles = sessionsNode, serving, "sessions"
			}

			prefix := fmt.Sprintf("role-%d-", time.Now().UnixNano())
			ids := make([]string, sessions)
			for i := range ids {
				ids[i] = other.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"%s%03d"}`, prefix, i))
			}
			deadline := time.Now().Add(120 * time.Second)
			for len(countLines(t, records, "effect ")) < sessions {
				if time.Now().After(deadline) {
					t.Fatal("tools never ran")
				}
				time.Sleep(5 * time.Millisecond)
			}
			victim.kill9(t)
			log := env.openLog(t)
			defer log.Close()
			modelDone, toolDone, unfinished := recordedIn(t, log, ids)
			if unfinished == 0 {
				t.Fatal("the kill landed after every session had finished; the test proves nothing")
			}
			replacement := startClusterNode(t, env, "r1", replacementRoles, script, records, modelLog)
			start := time.Now()
			waitCompleted(t, other, ids, "all recorded", 240*time.Second)
			r := checkAfterKill(t, records, modelLog, modelDone, toolDone, 3*sessions)
			if _, _, left := recordedIn(t, log, ids); left != 0 {
				t.Errorf("%d sessions unfinished in the log", left)
			}
			assertGapFree(t, log, ids)
			t.Logf("killed the only %s node with %d of %d sessions unfinished; all completed %s after its replacement started; re-issued %d model calls, %d tool calls; replacement's reissues: %d",
				victimRoles, unfinished, sessions, time.Since(start).Round(time.Second), r.reissuedModel, r.reissuedTool, replacement.gauge(t, "troupe_cluster_effect_requests_reissued_total"))
		})
	}
}

// TestClusterScaleInWithKcatTasksQueued shrinks a cluster under load: three nodes
// run tasks published with kcat, many queued on one session, and the owner of that
// session is stopped with SIGTERM while it works through the queue (kcat publishing
// more meanwhile), then a second node is stopped so, leaving one node to finish.
// Each stop hands the sessions over cleanly: every task completes once, in the
// order published, per session; every side effect happens once; and no model or
// tool call is made twice.
func TestClusterScaleInWithKcatTasksQueued(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	t.Setenv("TROUPE_MODEL_DELAY", "30ms")
	const sessions = 12

	nodes := map[string]*child{}
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes[name] = startClusterNode(t, env, name, "all", script, records, modelLog, "-v")
	}
	waitOwned(t, nodes["n1"], nodes["n2"], nodes["n3"])
	total := nodes["n1"].gauge(t, "troupe_cluster_partitions_total")
	conn := clickhouseConn(t, env)

	prefix := fmt.Sprintf("si-%d-", time.Now().UnixNano())
	hot := prefix + "hot"
	ids := []string{hot}
	inputs := map[string][]string{}
	publish := func(count int) {
		var lines []string
		for range count {
			in := fmt.Sprintf("%s t%02d", hot, len(inputs[hot]))
			inputs[hot] = append(inputs[hot], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, hot, in))
		}
		for s := range sessions {
			id := fmt.Sprintf("%ss%02d", prefix, s)
			if len(inputs[id]) == 0 {
				ids = append(ids, id)
			}
			in := fmt.Sprintf("%s t%02d", id, len(inputs[id]))
			inputs[id] = append(inputs[id], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	publish(30)
	publish(0)

	log := env.openLog(t)
	defer log.Close()
	if !waitTasksEnded(t, log, map[string]int{hot: 3}, 120*time.Second) {
		t.FailNow()
	}
	owner := ownerOf(t, conn, kafka.PartitionOf(hot, total))
	first := nodes[owner]
	if first == nil {
		t.Fatalf("partition of session %s is owned by %q", hot, owner)
	}
	delete(nodes, owner)
	publish(5)
	first.sigterm(t, time.Minute)
	publish(5)
	var rest []*child
	var second string
	for name, c := range nodes {
		rest = append(rest, c)
		second = name
	}
	waitOwned(t, rest...)
	if !waitTasksEnded(t, log, map[string]int{hot: 12}, 120*time.Second) {
		t.FailNow()
	}
	publish(5)
	nodes[second].sigterm(t, time.Minute)
	delete(nodes, second)
	publish(5)

	want := map[string]int{}
	all := 0
	for _, id := range ids {
		want[id] = len(inputs[id])
		all += len(inputs[id])
	}
	evs, err := log.Read(t.Context(), hot, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ended, _ := tasksOf(t, evs); len(ended) == want[hot] {
		t.Fatal("every queued task ended before the second stop; the test proves nothing")
	}
	if !waitTasksEnded(t, log, want, 240*time.Second) {
		t.FailNow()
	}
	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, all)
	for what, calls := range map[string]map[string]int{"model": countLines(t, modelLog, ""), "tool": countLines(t, records, "call ")} {
		for key, n := range calls {
			if n != 1 {
				t.Errorf("%s call %s was made %d times; after graceful stops, want once", what, key, n)
			}
		}
	}
	assertGapFree(t, log, ids)
	for _, c := range nodes {
		if n := c.gauge(t, "troupe_cluster_partitions_owned"); n != total {
			t.Errorf("the last node owns %d of %d partitions", n, total)
		}
	}
	t.Logf("tasks %d (%d on one session) over %d sessions, all completed once in order while %s and %s stopped", all, want[hot], len(ids), owner, second)
}

// TestClusterTwoNodesStoppedAtOnce scales a cluster in the way an orchestrator
// does (replicas 3 to 1): two of three nodes get SIGTERM at the same moment while
// tasks published with kcat run, many queued on one session. Both hand their
// sessions over in rebalances that overlap; the last node finishes everything:
// every task completes once, in the order published, per session; every side
// effect happens once; and no model or tool call is made twice.
func TestClusterTwoNodesStoppedAtOnce(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	t.Setenv("TROUPE_MODEL_DELAY", "30ms")
	const sessions = 12

	names := []string{"n1", "n2", "n3"}
	nodes := []*child{}
	for _, name := range names {
		nodes = append(nodes, startClusterNode(t, env, name, "all", script, records, modelLog, "-v"))
	}
	waitOwned(t, nodes...)
	total := nodes[0].gauge(t, "troupe_cluster_partitions_total")
	conn := clickhouseConn(t, env)

	prefix := fmt.Sprintf("sa-%d-", time.Now().UnixNano())
	hot := prefix + "hot"
	ids := []string{hot}
	inputs := map[string][]string{}
	publish := func(count int) {
		var lines []string
		for range count {
			in := fmt.Sprintf("%s t%02d", hot, len(inputs[hot]))
			inputs[hot] = append(inputs[hot], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, hot, in))
		}
		for s := range sessions {
			id := fmt.Sprintf("%ss%02d", prefix, s)
			if len(inputs[id]) == 0 {
				ids = append(ids, id)
			}
			in := fmt.Sprintf("%s t%02d", id, len(inputs[id]))
			inputs[id] = append(inputs[id], in)
			lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	publish(30)
	publish(0)
	publish(0)

	log := env.openLog(t)
	defer log.Close()
	if !waitTasksEnded(t, log, map[string]int{hot: 3}, 120*time.Second) {
		t.FailNow()
	}
	// The owner of the hot session is one of the two stopped, so that its queue
	// is handed over; the last node is another.
	owner := ownerOf(t, conn, kafka.PartitionOf(hot, total))
	last := -1
	var stopping []*child
	for i, name := range names {
		if name != owner && last < 0 {
			last = i
			continue
		}
		stopping = append(stopping, nodes[i])
	}
	if !slices.Contains(names, owner) {
		t.Fatalf("partition of session %s is owned by %q", hot, owner)
	}
	evs, err := log.Read(t.Context(), hot, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ended, _ := tasksOf(t, evs); len(ended) == len(inputs[hot]) {
		t.Fatal("every queued task of the hot session ended before its owner was stopped; the test proves nothing")
	}
	stopped := make(chan struct{}, len(stopping))
	for _, c := range stopping {
		go func() {
			defer func() { stopped <- struct{}{} }()
			if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
				return
			}
			// Bounded, as sigterm waits: a node that hangs is killed, so that the
			// test fails with its log rather than at the run's timeout, leaving
			// its processes behind.
			exited := make(chan error, 1)
			go func() { exited <- c.cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("a node exited with %v after SIGTERM", err)
				}
			case <-time.After(time.Minute):
				_ = c.cmd.Process.Kill()
				<-exited
				t.Errorf("a node did not exit within a minute of SIGTERM:\n%s", tail(c.stderr.String(), 8000))
			}
		}()
	}
	publish(5)
	<-stopped
	<-stopped
	publish(5)

	want := map[string]int{}
	all := 0
	for _, id := range ids {
		want[id] = len(inputs[id])
		all += len(inputs[id])
	}
	if !waitTasksEnded(t, log, want, 240*time.Second) {
		t.FailNow()
	}
	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, all)
	for what, calls := range map[string]map[string]int{"model": countLines(t, modelLog, ""), "tool": countLines(t, records, "call ")} {
		for key, n := range calls {
			if n != 1 {
				t.Errorf("%s call %s was made %d times; after graceful stops, want once", what, key, n)
			}
		}
	}
	assertGapFree(t, log, ids)
	if n := nodes[last].gauge(t, "troupe_cluster_partitions_owned"); n != total {
		t.Errorf("the last node owns %d of %d partitions", n, total)
	}
	t.Logf("tasks %d (%d on one session) over %d sessions, all completed once in order while two nodes, %s the hot session's owner among them, stopped at once; %s finished them",
		all, want[hot], len(ids), owner, names[last])
}
