package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterPausedNodeIsNotStranded: a node frozen past its group's session
// timeout (SIGSTOP) loses its partitions to a node of its own group, which takes
// their leases; woken (SIGCONT), it reads tasks of its former partitions and is
// fenced as it starts their sessions, as a node whose partitions a node of another
// group took would be. But its group revokes them within the rebalance timeout, so
// it must not say its partitions are stranded: past that timeout, its /healthz
// answers ok, its troupe_cluster_partitions_stranded is 0, and it logged no
// "partitions stranded".
func TestClusterPausedNodeIsNotStranded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses node processes")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_CLICKHOUSE") == "" {
		t.Skip("TROUPE_TEST_KAFKA and TROUPE_TEST_CLICKHOUSE are not both set: a paused node must be evicted by a real Kafka group")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	victim := startClusterNode(t, env, "n1", "all", script, records, modelLog, "--idle-timeout", "1s")
	t.Cleanup(func() { _ = victim.cmd.Process.Signal(syscall.SIGCONT) })
	survivor := startClusterNode(t, env, "n2", "all", script, records, modelLog)
	waitOwned(t, victim, survivor)

	const sessions = 12
	prefix := fmt.Sprintf("pausedstranded-%d-", time.Now().UnixNano())
	var first []string
	for i := range sessions {
		first = append(first, survivor.post(t, fmt.Sprintf(`{"input":"record","session_id":"%s%d"}`, prefix, i)))
	}
	waitCompleted(t, survivor, first, "recorded", 90*time.Second)
	victimEpoch := victim.gauge(t, "troupe_cluster_ownership_epoch")
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "n2 owns every partition under an epoch above n1's", func() bool {
		total := survivor.gauge(t, "troupe_cluster_partitions_total")
		return total > 0 && survivor.gauge(t, "troupe_cluster_ownership_epoch") > victimEpoch &&
			survivor.gauge(t, "troupe_cluster_partitions_owned") == total
	})
	// Tasks on every partition while n1 sleeps: woken, n1 reads those of its
	// former partitions while it still believes it owns them.
	var second []string
	for i := range sessions {
		second = append(second, survivor.post(t, fmt.Sprintf(`{"input":"record","session_id":"%s%d"}`, prefix, i)))
	}
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := time.Now()
	waitCompleted(t, survivor, second, "recorded", 90*time.Second)
	waitOwned(t, victim, survivor)
	if !strings.Contains(victim.stderr.String(), "another node owns the session's partition now") {
		t.Log("n1 was not fenced after its wake (it read no task of its former partitions before its revoke); the check below is weaker")
	}
	// Past the group's rebalance timeout after the wake, with a margin.
	time.Sleep(35*time.Second - time.Since(woke))
	if code, body := healthz(t, victim); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("n1's /healthz after a pause its group lived through: %d %s", code, body)
	}
	if n := victim.gauge(t, "troupe_cluster_partitions_stranded"); n != 0 {
		t.Errorf("n1's troupe_cluster_partitions_stranded: %d", n)
	}
	if strings.Contains(victim.stderr.String(), "partitions stranded") {
		t.Error("n1 logged that its partitions are stranded after a pause its group lived through")
	}
}
