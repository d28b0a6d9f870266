package node

import (
	"testing"
	"time"
)

// A burst of refused vectors is logged parkLogBurst at a time each minute; the
// next minute's first says how many were not.
func TestParkLogBoundsTheLinesAMinute(t *testing.T) {
	var pl parkLog
	t0 := time.Unix(1_800_000_000, 0)
	logged := 0
	for i := range 1000 {
		ok, unlogged := pl.allow(t0.Add(time.Duration(i) * time.Millisecond))
		if unlogged != 0 {
			t.Fatalf("refusal %d: %d unlogged reported within the first minute", i, unlogged)
		}
		if ok {
			logged++
		}
	}
	if logged != parkLogBurst {
		t.Fatalf("%d of 1000 refusals in a minute logged, want %d", logged, parkLogBurst)
	}
	ok, unlogged := pl.allow(t0.Add(time.Minute + time.Second))
	if !ok || unlogged != 1000-parkLogBurst {
		t.Fatalf("the next minute's first: logged %v, unlogged %d; want true and %d", ok, unlogged, 1000-parkLogBurst)
	}
}
