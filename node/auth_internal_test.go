package node

import (
	"fmt"
	"testing"
	"time"
)

// Buckets left alone until they are full again are dropped: a node that saw a
// hundred thousand clients keeps the buckets of the recent ones, and a dropped
// client starts over with a full bucket, as it would have had.
func TestLimitersForgetIdleClients(t *testing.T) {
	l := newLimiters(10, 5) // full again after 0.5 s
	start := time.Unix(1_000_000, 0)
	for i := range 100_000 {
		now := start.Add(time.Duration(i) * 100 * time.Microsecond) // 10 s in all
		if _, ok := l.allow(fmt.Sprintf("ip:%d", i), now); !ok {
			t.Fatalf("client %d's first request was refused", i)
		}
	}
	// 0.5 s of clients is 5,000 buckets; sweeps run when the count doubles.
	if n := l.size(); n > 4*5000+minSweep {
		t.Fatalf("%d buckets held after 100,000 clients over 10 s, want at most about 20,000", n)
	}
	// A limited client is still limited: its bucket is not idle.
	now := start.Add(20 * time.Second)
	for range 5 {
		l.allow("busy", now)
	}
	if wait, ok := l.allow("busy", now); ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("past the burst: allowed %v, wait %v; want refused with a wait of at most 100 ms", ok, wait)
	}
}
