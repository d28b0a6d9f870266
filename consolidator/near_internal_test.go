package consolidator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// closePairs makes groups of memories whose vectors (dim 384) have cosines with
// their group's first spread from lo to 1, and lo·lo to 1 among themselves.
func closePairs(n int, lo float64, seed uint64) []memory.Memory {
	const dim = 384
	r := rand.New(rand.NewPCG(seed, 2))
	gauss := func() []float64 {
		v := make([]float64, dim)
		var s float64
		for i := range v {
			v[i] = r.NormFloat64()
			s += v[i] * v[i]
		}
		for i := range v {
			v[i] /= math.Sqrt(s)
		}
		return v
	}
	var mems []memory.Memory
	for len(mems) < n {
		u := gauss()
		for k := 0; k < 4 && len(mems) < n; k++ {
			w := gauss()
			var d float64
			for i := range w {
				d += w[i] * u[i]
			}
			var s float64
			for i := range w {
				w[i] -= d * u[i]
				s += w[i] * w[i]
			}
			c := lo + (1-lo)*r.Float64()
			if k == 0 {
				c = 1
			}
			v := make([]float32, dim)
			for i := range v {
				v[i] = float32(c*u[i] + math.Sqrt(1-c*c)*w[i]/math.Sqrt(s))
			}
			mems = append(mems, memory.Memory{ID: fmt.Sprintf("m_%06d", len(mems)), Tier: memory.Episodic, Vector: v})
		}
	}
	return mems
}

// The hashed search finds only pairs within the threshold, with the cosines the
// exhaustive one computes, and nearly all of those the exhaustive one finds.
func TestNearByHashingFindsAlmostEveryClosePair(t *testing.T) {
	for _, s := range []float64{0.92, 0.8, 0.75} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			mems := closePairs(ExhaustiveBelow+500, s-0.05, 1)
			pl := newPlanner(context.Background(), time.Now(), mems, DefaultPolicy())
			ns := pl.near(pl.items, s)
			if ns.tables == nil {
				t.Fatalf("%d items at threshold %v: compared exhaustively, want hashing", len(pl.items), s)
			}
			found := map[[2]int]float64{}
			for i := range pl.items {
				ns.each(i, i+1, func(int) bool { return false }, func(j int, c float64) { found[[2]int{i, j}] = c })
			}
			all, near, nearFound := 0, 0, 0
			for i, a := range pl.items {
				for j := i + 1; j < len(pl.items); j++ {
					c, ok := pl.cos(a, pl.items[j])
					got, hit := found[[2]int{i, j}]
					if hit && (!ok || c < s || got != c) {
						t.Fatalf("pair %d, %d found with cosine %v: exact %v, threshold %v", i, j, got, c, s)
					}
					if !ok || c < s {
						continue
					}
					all++
					if c < s+0.02 {
						near++
						if hit {
							nearFound++
						}
					}
				}
			}
			if pl.err != nil {
				t.Fatal(pl.err)
			}
			t.Logf("threshold %v: found %d of %d pairs, %d of %d within 0.02 of it", s, len(found), all, nearFound, near)
			if float64(len(found)) < 0.98*float64(all) || float64(nearFound) < 0.95*float64(near) {
				t.Errorf("threshold %v: found %d of %d pairs, %d of %d within 0.02 of it", s, len(found), all, nearFound, near)
			}
		})
	}
}
