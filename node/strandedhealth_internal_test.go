package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
)

// TestStrandedPartitionsLeaveTheNodeInRotation: a node whose group left it
// holding a partition another node took (a node started with another --group on
// the same log) past the group's rebalance timeout says so on /healthz, but stays
// in a load balancer's rotation: 200, degraded, with the reason. Its POST
// /v1/tasks still takes tasks, which go to the bus by their partition whichever
// node takes them, and it runs the partitions it still holds; such a node of
// another group takes every partition, so that every node of the cluster finds
// itself stranded at once. Before, /healthz answered 503: a load balancer took
// every node of the cluster out of rotation, and with them every session read,
// stream and task post, for partitions nobody could route around anyway.
func TestStrandedPartitionsLeaveTheNodeInRotation(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, HandoffGrace: 50 * time.Millisecond,
		Bus: &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	n.Assigned([]int{0}, 1)
	// A node of another group takes the partition's lease.
	if _, err := log.Own(ctx, "other", []int{0}); err != nil {
		t.Fatal(err)
	}
	env, err := n.ingress.Admit(Task{Input: "hello", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	// The session's start is fenced (stillOwned); whatever the answer, the
	// node records the partition as another node's.
	_, _ = n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 10*time.Second).Result()
	deadline := time.Now().Add(30 * time.Second)
	for n.own.fenced.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the node was not fenced on its partition")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The group's rebalance timeout passes without a rebalance.
	f := *n.own.fenced.Load()
	f.since = f.since.Add(-strandedAfter - time.Second)
	n.own.fenced.Store(&f)

	w := httptest.NewRecorder()
	n.healthz(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var body struct{ Status, Reason string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/healthz: %d %s: %v", w.Code, w.Body, err)
	}
	if w.Code != http.StatusOK || body.Status != "degraded" {
		t.Errorf("/healthz of a node with a stranded partition: %d %s, want 200 degraded", w.Code, w.Body)
	}
	if !strings.Contains(body.Reason, "partitions [0]") || !strings.Contains(body.Reason, "--group") {
		t.Errorf("/healthz does not say which partitions are stranded and what to check: %s", body.Reason)
	}
	if err := n.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	if err := n.Degraded(); err == nil || !strings.Contains(err.Error(), "taken by another node") {
		t.Errorf("Degraded: %v", err)
	}
	// A 200 is nothing to alert on: the gauge counts the stranded partitions.
	if v := strandedGaugeValue(t, n); v != 1 {
		t.Errorf("troupe_cluster_partitions_stranded: %v, want 1", v)
	}

	// The group's next rebalance (a member joining or leaving) gives the node its
	// partition back under a new lease: it says nothing of it any more.
	n.Revoked()
	if err := n.Degraded(); err != nil {
		t.Errorf("Degraded once the partition was revoked: %v", err)
	}
	n.Assigned([]int{0}, 1)
	w = httptest.NewRecorder()
	n.healthz(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"ok"`) {
		t.Errorf("/healthz once the partition was assigned again: %d %s", w.Code, w.Body)
	}
	if v := strandedGaugeValue(t, n); v != 0 {
		t.Errorf("troupe_cluster_partitions_stranded once the partition was assigned again: %v, want 0", v)
	}
}

// strandedGaugeValue is the node's troupe_cluster_partitions_stranded.
func strandedGaugeValue(t *testing.T, n *Node) float64 {
	t.Helper()
	families, err := n.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "troupe_cluster_partitions_stranded" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no metric troupe_cluster_partitions_stranded")
	return 0
}
