package node

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// A watcher that reads late gets every event in order (its channel is small, the
// backlog behind it holds the rest); one that falls further behind than the backlog
// is disconnected; neither blocks delivery.
func TestHubBacklogAndDisconnect(t *testing.T) {
	h := newHub()
	slow, stopSlow := h.subscribe("s")
	defer stopSlow()
	stuck, stopStuck := h.subscribe("s")
	defer stopStuck()
	const n = watcherBuffer + watcherBacklog/2
	for i := range n {
		h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: uint64(i + 1)}})
	}
	for i := range n {
		select {
		case e, ok := <-slow:
			if !ok || e.Seq != uint64(i+1) {
				t.Fatalf("event %d: got seq %d (open %v)", i+1, e.Seq, ok)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d never came", i+1)
		}
	}
	// stuck has read nothing: past its channel and backlog it is disconnected.
	for i := range watcherBacklog {
		h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: uint64(n + i + 1)}})
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-stuck:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watcher that fell behind was not disconnected")
		}
	}
}
