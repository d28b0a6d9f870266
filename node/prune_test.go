package node_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A node on a shared bus prunes the messages too large for it that the log kept
// for their references, once older than Bus.StoredRetention, and keeps the newer
// ones; a node that keeps them for good prunes none.
func TestNodePrunesStoredBusMessages(t *testing.T) {
	k := newKafkaEnv(t)
	now := time.Now()
	store := func(n *node.Node, seq uint64, ts time.Time) string {
		t.Helper()
		stream := messages.EffectStream(messages.BusStoredReply, messages.EffectKey{SessionID: "pruned", Seq: seq})
		e, err := messages.BusStoredEvent(stream, []byte(`{"v":1,"session_id":"pruned","output":"long"}`), ts.UnixMicro())
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Log().Append(t.Context(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
		return stream
	}
	stored := func(n *node.Node, stream string) bool {
		t.Helper()
		events, err := n.Log().Read(t.Context(), stream, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(events) > 0
	}

	// Kept for good: nothing is pruned, however old.
	keeper := k.nodeWith(t, node.Config{Bus: &node.Bus{StoredRetention: -1}})
	ancient := store(keeper, 2, now.Add(-365*24*time.Hour))

	n := k.nodeWith(t, node.Config{Bus: &node.Bus{StoredRetention: time.Second}}) // pruned every 125 ms
	old := store(n, 3, now.Add(-time.Hour))
	recent := store(n, 4, now.Add(time.Hour))
	deadline := time.Now().Add(20 * time.Second)
	for stored(n, old) {
		if time.Now().After(deadline) {
			t.Fatalf("stream %s, an hour old, is still stored 20 s after a node with a retention of 1 s started", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !stored(n, recent) {
		t.Errorf("stream %s, stamped within the retention, was pruned", recent)
	}
	// The prune counts what it deleted once its deletion returned, which a read
	// may see first.
	for got := prunedTotal(t, n); got != 1; got = prunedTotal(t, n) {
		if got > 1 || time.Now().After(deadline) {
			t.Fatalf("troupe_bus_stored_messages_pruned_total = %v, want 1", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // two more rounds of n, had keeper pruned
	if !stored(keeper, ancient) {
		t.Errorf("stream %s was pruned by a node that keeps stored messages for good", ancient)
	}
	if got := prunedTotal(t, keeper); got != 0 {
		t.Errorf("keeper's troupe_bus_stored_messages_pruned_total = %v, want 0", got)
	}
}

// prunedTotal is the node's troupe_bus_stored_messages_pruned_total.
func prunedTotal(t *testing.T, n *node.Node) float64 {
	t.Helper()
	families, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "troupe_bus_stored_messages_pruned_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no metric troupe_bus_stored_messages_pruned_total")
	return 0
}
