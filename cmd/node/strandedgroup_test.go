package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClusterNodeOfAnotherGroupStrandsTheClustersPartitions: a user adds a node to
// a cluster with a mistyped --group. It reads every partition of troupe.tasks in a
// group of its own and takes their leases in the shared log, so the cluster's node
// is fenced as it starts a session: its group still assigns it the partitions and
// will not move them, so it runs none of their tasks until its group's next
// rebalance, and once the other node is stopped nothing runs them. The node must
// say so: its /healthz answers 200 degraded with the reason (a 503 would take
// every node of the cluster out of rotation at once), and it logs it. Restarted, once
// the other node is gone, it takes its partitions back and runs their tasks.
// Before, its /healthz answered ok, and tasks posted to it after the other node
// stopped waited for ever.
func TestClusterNodeOfAnotherGroupStrandsTheClustersPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	n1 := startClusterNode(t, env, "n1", "all", script, records, modelLog)
	waitOwned(t, n1)
	other := env
	other.group = env.group + "-typo"
	n2 := startClusterNode(t, other, "n2", "all", script, records, modelLog)
	waitOwned(t, n2)

	prefix := fmt.Sprintf("stranded-%d-", time.Now().UnixNano())
	// Tasks for sessions of several partitions: each node reads each, and n1,
	// whose leases n2 took, is fenced as it starts their sessions.
	var ids []string
	for i := range 4 {
		ids = append(ids, n1.post(t, fmt.Sprintf(`{"input":"record","session_id":"%s%d"}`, prefix, i)))
	}
	waitCompleted(t, n2, ids, "recorded", 60*time.Second)

	var reason string
	waitFor(t, 90*time.Second, "n1 to say its partitions are stranded", func() bool {
		code, body := healthz(t, n1)
		reason = body
		// Degraded, not out of rotation: every node of the cluster is stranded at
		// once by such a node, and still queues tasks and serves reads.
		return code == http.StatusOK && strings.Contains(body, `"degraded"`) && strings.Contains(body, "taken by another node")
	})
	if !strings.Contains(reason, "--group") {
		t.Errorf("n1's /healthz does not say what to check: %s", reason)
	}
	if code, body := healthz(t, n2); code != http.StatusOK {
		t.Errorf("n2's /healthz: %d %s", code, body)
	}
	if !strings.Contains(n1.stderr.String(), "partitions stranded") {
		t.Error("n1 did not log that its partitions are stranded")
	}
	if n := n1.gauge(t, "troupe_cluster_partitions_stranded"); n == 0 {
		t.Error("n1's troupe_cluster_partitions_stranded is 0")
	}

	// As the reason says: stop the other node, then restart this one.
	n2.sigterm(t, time.Minute)
	n1.sigterm(t, time.Minute)
	n1 = startClusterNode(t, env, "n1", "all", script, records, modelLog)
	waitOwned(t, n1)
	var later []string
	for i := range 4 {
		later = append(later, n1.post(t, fmt.Sprintf(`{"input":"record","session_id":"%slater-%d"}`, prefix, i)))
	}
	waitCompleted(t, n1, later, "recorded", 60*time.Second)
	if code, body := healthz(t, n1); code != http.StatusOK {
		t.Errorf("restarted n1's /healthz: %d %s", code, body)
	}
	t.Logf("n1 said: %s", reason)
}

// healthz returns the node's /healthz status and body.
func healthz(t *testing.T, c *child) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + c.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
