package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterPausedNodePerformsNoEffectOfSessionsItLost is TestClusterPausedNodeIsFenced
// with queued tasks, and tasks sent while the paused node sleeps, which it reads from
// its (former) partitions when it wakes up. Found by hand on a
// three-node cluster (real Kafka 4.1, ClickHouse 18.16): a node frozen with SIGSTOP
// past the group's session timeout, woken with SIGCONT, is fenced at its first
// append, but its tasks handler retries the record it held ("this node does not own
// the session"), which starts the session's actor again on it: the actor folds the
// session from the log, which now holds the new owner's progress, and re-issues the
// effects the new owner requested and has not yet answered. So the stale node
// performs model calls (and tool calls) of sessions another node runs, under their
// keys, before its next append is fenced: a model call billed twice, a tool's side
// effect made twice. Here each node logs its own model calls; after SIGCONT the
// paused node must perform no call whose key the new owner performed (a node
// fenced on a partition now starts none of its sessions until its next
// assignment: Node.fencedOut). Seen once in CI after that: n1 started one model
// call of a session n2 had taken over, in the second before it learned of its
// eviction, and appended nothing of it: a call a live session requested before the
// pause (its request appended, the call not started yet, or queued behind the
// model's concurrency bound) started as n1 woke. Now a call checks the lease as it
// is about to start, and after a pause reads the partition's epoch in the log
// first (node's ownsCall, TestPausedNodeStartsNoCallOfASessionItLost).
func TestClusterPausedNodePerformsNoEffectOfSessionsItLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses node processes")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_CLICKHOUSE") == "" {
		t.Skip("TROUPE_TEST_KAFKA and TROUPE_TEST_CLICKHOUSE are not both set: a paused node must be evicted by a real Kafka group")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, _ := threeRecordsScript(t, dir)
	victimLog, survivorLog := dir+"/model-n1.txt", dir+"/model-n2.txt"
	t.Setenv("TROUPE_MODEL_DELAY", "1s") // so that the new owner has calls in flight when n1 wakes
	const sessions, tasks = 8, 10

	victim := startClusterNode(t, env, "n1", "all", script, records, victimLog)
	t.Cleanup(func() { _ = victim.cmd.Process.Signal(syscall.SIGCONT) })
	survivor := startClusterNode(t, env, "n2", "all", script, records, survivorLog)
	waitOwned(t, victim, survivor)

	prefix := fmt.Sprintf("pausedq-%d-", time.Now().UnixNano())
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	for k := 0; k < tasks; k++ {
		for _, id := range ids {
			survivor.post(t, fmt.Sprintf(`{"input":"record three things","session_id":%q,"task_id":"t-%d"}`, id, k))
		}
	}
	waitFor(t, 60*time.Second, "n1 performs model calls", func() bool { return len(countLines(t, victimLog, "")) >= 10 })
	victimEpoch := victim.gauge(t, "troupe_cluster_ownership_epoch")
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "n2 owns every partition under an epoch above n1's", func() bool {
		total := survivor.gauge(t, "troupe_cluster_partitions_total")
		return total > 0 && survivor.gauge(t, "troupe_cluster_ownership_epoch") > victimEpoch &&
			survivor.gauge(t, "troupe_cluster_partitions_owned") == total
	})
	calls := len(countLines(t, survivorLog, ""))
	waitFor(t, 60*time.Second, "n2 goes on with n1's sessions", func() bool { return len(countLines(t, survivorLog, "")) >= calls+10 })
	// Tasks sent while n1 sleeps land on its former partitions: n2 reads and records
	// them, and n1, when it wakes, reads them too (a fetch needs no group membership)
	// while it still believes it owns the partitions.
	for _, id := range ids {
		survivor.post(t, fmt.Sprintf(`{"input":"record three things","session_id":%q,"task_id":"t-late"}`, id))
	}
	time.Sleep(2 * time.Second)
	wakeWithoutStaleCalls(t, victim, victimLog, survivorLog)
}

// TestClusterPausedIdleNodePerformsNoEffectOfSessionsItLost is
// TestClusterPausedNodePerformsNoEffectOfSessionsItLost for a paused node that had
// nothing in flight when it froze: its sessions had finished their tasks and
// passivated, so no write of it was refused after it woke, which is what stopped
// the fenced sessions there. Its first records after waking are tasks that the
// partitions' new owner is running: the node started their sessions again (they
// ran there before: no claim, a fold of the log), folded the new owner's history
// and performed the model calls that owner had in flight, under their keys. Now a
// session starting on a node checks its partition's epoch in the log once it has
// read its events (leasedStore.stillOwned), and stops when another node took it.
func TestClusterPausedIdleNodePerformsNoEffectOfSessionsItLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses node processes")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_CLICKHOUSE") == "" {
		t.Skip("TROUPE_TEST_KAFKA and TROUPE_TEST_CLICKHOUSE are not both set: a paused node must be evicted by a real Kafka group")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, _ := threeRecordsScript(t, dir)
	victimLog, survivorLog := dir+"/model-n1.txt", dir+"/model-n2.txt"
	t.Setenv("TROUPE_MODEL_DELAY", "1s") // so that the new owner has calls in flight when n1 wakes
	const sessions = 12

	// n1 passivates its idle sessions soon, so that nothing of them is live there
	// when it freezes.
	victim := startClusterNode(t, env, "n1", "all", script, records, victimLog, "--idle-timeout", "1s")
	t.Cleanup(func() { _ = victim.cmd.Process.Signal(syscall.SIGCONT) })
	survivor := startClusterNode(t, env, "n2", "all", script, records, survivorLog)
	waitOwned(t, victim, survivor)

	prefix := fmt.Sprintf("pausedidle-%d-", time.Now().UnixNano())
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
		survivor.post(t, fmt.Sprintf(`{"input":"record three things","session_id":%q,"task_id":"t-0"}`, ids[i]))
	}
	// Every session's first task ends (three model calls each), and n1's sessions
	// passivate: n1 has nothing in flight.
	waitFor(t, 90*time.Second, "every first task ends", func() bool {
		return len(countLines(t, victimLog, ""))+len(countLines(t, survivorLog, "")) >= 3*sessions
	})
	if len(countLines(t, victimLog, "")) == 0 {
		t.Fatal("n1 ran none of the sessions; the test proves nothing")
	}
	waitFor(t, 30*time.Second, "n1's sessions passivate", func() bool { return victim.gauge(t, "troupe_sessions_live") == 0 })
	time.Sleep(time.Second) // the last task's result and commit
	victimEpoch := victim.gauge(t, "troupe_cluster_ownership_epoch")
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "n2 owns every partition under an epoch above n1's", func() bool {
		total := survivor.gauge(t, "troupe_cluster_partitions_total")
		return total > 0 && survivor.gauge(t, "troupe_cluster_ownership_epoch") > victimEpoch &&
			survivor.gauge(t, "troupe_cluster_partitions_owned") == total
	})
	// Second tasks, sent while n1 sleeps, land on every partition: n2 runs them,
	// and n1, when it wakes, reads those of its former partitions while it still
	// believes it owns them.
	calls := len(countLines(t, survivorLog, ""))
	for _, id := range ids {
		survivor.post(t, fmt.Sprintf(`{"input":"record three things","session_id":%q,"task_id":"t-1"}`, id))
	}
	waitFor(t, 60*time.Second, "n2 runs the second tasks", func() bool { return len(countLines(t, survivorLog, "")) >= calls+sessions })
	wakeWithoutStaleCalls(t, victim, victimLog, survivorLog)
}

// wakeWithoutStaleCalls sends SIGCONT to the paused victim, waits a few seconds
// (the window between its wake-up and the group's next rebalance, in which it
// still believes it owns its partitions), and fails the test if it performed a
// model call under a key the survivor performed too (a session the survivor
// runs now). victimLog and survivorLog list the nodes' model calls' keys.
func wakeWithoutStaleCalls(t *testing.T, victim *child, victimLog, survivorLog string) {
	t.Helper()
	before, err := os.ReadFile(victimLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGCONT at %s", time.Now().UTC().Format(time.RFC3339Nano))
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	after, err := os.ReadFile(victimLog)
	if err != nil {
		t.Fatal(err)
	}
	byN2 := countLines(t, survivorLog, "")
	var stale []string
	for _, key := range strings.Split(strings.TrimSpace(string(after[len(before):])), "\n") {
		if key != "" && byN2[key] > 0 {
			stale = append(stale, key)
		}
	}
	if len(stale) > 0 {
		t.Errorf("after SIGCONT, n1 performed %d model calls of sessions n2 runs now, under keys n2 performed too: %q", len(stale), stale)
	}
}
