package node

import (
	"context"
	"testing"
	"time"
)

// TestLiveToleratesABusyHostUntilItsProbeIsOverdue: a session host that answered
// its last probe and is slow to answer the next (busy under a burst of tasks)
// keeps the node alive; one whose probe is overdue, or that never answered,
// does not.
func TestLiveToleratesABusyHostUntilItsProbeIsOverdue(t *testing.T) {
	release := make(chan struct{})
	calls := 0
	p := &healthProbe{what: "the session host", run: func(ctx context.Context) error {
		calls++
		if calls == 1 {
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	}}
	soon := func() time.Time { return time.Now().Add(20 * time.Millisecond) }
	if err := p.waitLenient(p.start(), time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	busy := p.start() // the second probe hangs
	if err := p.wait(busy, soon()); err == nil {
		t.Fatal("a strict wait took a probe under way for an answer")
	}
	if err := p.waitLenient(busy, soon()); err != nil {
		t.Fatalf("a host busy past healthWait, whose last probe went through, is not alive: %v", err)
	}
	p.mu.Lock()
	p.began = time.Now().Add(-healthTimeout) // the probe under way is overdue
	p.mu.Unlock()
	if err := p.waitLenient(busy, soon()); err == nil {
		t.Fatal("a host whose probe is overdue counts as alive")
	}
	close(release)
	<-busy

	never := &healthProbe{what: "the session host", run: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	if err := never.waitLenient(never.start(), soon()); err == nil {
		t.Fatal("a host that never answered a probe counts as alive")
	}
}
