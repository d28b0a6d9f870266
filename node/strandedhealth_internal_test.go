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
}
