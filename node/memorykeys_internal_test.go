package node

import (
	"fmt"
	"testing"
	"time"
)

// The table of recent Idempotency-Keys stays within memoryKeysMax claims, its
// order of claims too, whatever the keys: each claimed and released (a request
// answered 4xx frees its key) or each claimed again after memoryKeyTTL. Before,
// a released claim stayed in the order until its 24 hours were over: a client
// sending distinct keys with bad requests grew it without bound.
func TestMemoryRequestKeysStayBounded(t *testing.T) {
	var k memoryRequestKeys
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 3 * memoryKeysMax {
		key := fmt.Sprintf("key-%d", i)
		if ok, fresh := k.claim(key, "d", now); !ok || !fresh {
			t.Fatalf("claim %d: %v %v", i, ok, fresh)
		}
		k.release(key, "d")
	}
	if len(k.keys) != 0 || len(k.order) > 2*memoryKeysMax {
		t.Errorf("after %d claims released: %d keys, %d in the order; want none, at most %d", 3*memoryKeysMax, len(k.keys), len(k.order), 2*memoryKeysMax)
	}
	at := now
	for range 3 * memoryKeysMax {
		at = at.Add(memoryKeyTTL)
		k.claim("same", "d", at)
	}
	if len(k.keys) != 1 || len(k.order) > 2*memoryKeysMax {
		t.Errorf("one key claimed again every %s: %d keys, %d in the order", memoryKeyTTL, len(k.keys), len(k.order))
	}
	if ok, _ := k.claim("same", "other", at.Add(time.Minute)); ok {
		t.Errorf("the key's last claim was let go")
	}
}
