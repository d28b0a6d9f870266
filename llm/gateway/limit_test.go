package gateway_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// blocking answers once release is closed, counting the calls in flight.
type blocking struct {
	name, provider string
	inflight, peak *atomic.Int32
	started        atomic.Int32
	release        chan struct{}
}

func (b *blocking) Name() string     { return b.name }
func (b *blocking) Provider() string { return b.provider }
func (b *blocking) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	b.started.Add(1)
	n := b.inflight.Add(1)
	for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
	}
	defer b.inflight.Add(-1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return answer("ok"), nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Two models of one provider share its slots; another provider has slots of its own.
func TestLimitConcurrencySharesAProvidersSlots(t *testing.T) {
	var inflight, peak, otherInflight, otherPeak atomic.Int32
	release := make(chan struct{})
	a := &blocking{name: "model-a", provider: "p", inflight: &inflight, peak: &peak, release: release}
	b := &blocking{name: "model-b", provider: "p", inflight: &inflight, peak: &peak, release: release}
	other := &blocking{name: "model-c", provider: "q", inflight: &otherInflight, peak: &otherPeak, release: release}
	limit := gateway.LimitConcurrency(map[string]int{"p": 2})
	models := []llm.Model{limit(a), limit(b), limit(a), limit(b), limit(other), limit(other), limit(other)}
	var wg sync.WaitGroup
	for _, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Generate(context.Background(), ask("q")); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, "two calls of provider p and three of q in flight", func() bool { return inflight.Load() == 2 && otherInflight.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // room for a third call of p to slip in, if the limit leaked
	close(release)
	wg.Wait()
	if peak.Load() != 2 || otherPeak.Load() != 3 {
		t.Fatalf("peak %d for p (limit 2), %d for q (default 64)", peak.Load(), otherPeak.Load())
	}
}

func TestLimitConcurrencyStopsWaitingWhenTheContextEnds(t *testing.T) {
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	defer close(release)
	m := &blocking{name: "m", provider: "p", inflight: &inflight, peak: &peak, release: release}
	limited := gateway.LimitConcurrency(map[string]int{"p": 1})(m)
	go limited.Generate(context.Background(), ask("holds the slot"))
	waitFor(t, "the first call to hold the slot", func() bool { return m.started.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(10 * time.Millisecond) // let the second call queue; it must leave whether or not it did
		cancel()
	}()
	_, err := generateWithin(t, limited, ctx, ask("waits"))
	if !errors.Is(err, context.Canceled) || m.started.Load() != 1 {
		t.Fatalf("err %v, calls started %d", err, m.started.Load())
	}
	if _, err := limited.Generate(ctx, ask("cancelled before")); !errors.Is(err, context.Canceled) || m.started.Load() != 1 {
		t.Fatalf("err %v, calls started %d", err, m.started.Load())
	}
}
