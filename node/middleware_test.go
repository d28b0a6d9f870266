package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// countingHandler counts the messages that reach it.
func countingHandler(n *int) message.HandlerFunc {
	return func(*message.Message) ([]*message.Message, error) {
		*n++
		return nil, nil
	}
}

// The IDs a deduplicator remembers are bounded by count, not only by age: a node
// that handled more messages within the TTL than the bound forgets the oldest first
// (each session's log still refuses a task it recorded before).
func TestDeduplicatorKeepsAtMostMaxIDs(t *testing.T) {
	d := newDeduplicator(newMetrics(), time.Hour, 100)
	handled := 0
	h := d.middleware(countingHandler(&handled))
	for i := range 1000 {
		if _, err := h(message.NewMessage(fmt.Sprintf("m%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.size(); n > 100 {
		t.Fatalf("the deduplicator remembers %d IDs, want at most 100", n)
	}
	_, _ = h(message.NewMessage("m999", nil)) // recent: skipped
	_, _ = h(message.NewMessage("m0", nil))   // forgotten: handled again
	if handled != 1001 {
		t.Fatalf("handled %d messages, want 1001 (m999 skipped as a duplicate, m0 forgotten)", handled)
	}
}

// IDs older than the TTL are forgotten when no message comes, too: an idle node does
// not keep what it handled before it went idle.
func TestDeduplicatorForgetsExpiredIDsWithoutTraffic(t *testing.T) {
	d := newDeduplicator(newMetrics(), time.Minute, 1000)
	handled := 0
	h := d.middleware(countingHandler(&handled))
	for i := range 10 {
		if _, err := h(message.NewMessage(fmt.Sprintf("m%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	d.expire(time.Now().Add(30 * time.Second))
	if n := d.size(); n != 10 {
		t.Fatalf("after 30 s the deduplicator remembers %d IDs, want 10", n)
	}
	d.expire(time.Now().Add(2 * time.Minute))
	if n := d.size(); n != 0 {
		t.Fatalf("after 2 minutes the deduplicator remembers %d IDs, want 0", n)
	}
}
