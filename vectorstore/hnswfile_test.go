package vectorstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

func fuzzCollection() *collection {
	rng := rand.New(rand.NewPCG(1, 1))
	batch := make([]Item, 40)
	for i := range batch {
		batch[i] = Item{ID: fmt.Sprint(i), Vector: []float32{rng.Float32() + 0.1, rng.Float32(), rng.Float32(), rng.Float32()}}
	}
	prep, dim, err := prepareItems(batch)
	if err != nil {
		panic(err)
	}
	c := newStableCollection(dim)
	c.upsertStable(prep)
	return c
}

// FuzzLoadGraph: a graph file whose checksums held but whose content is bad must be
// rejected or loaded into a graph that searches without panicking and finds every
// item.
func FuzzLoadGraph(f *testing.F) {
	c := fuzzCollection()
	c.g = newGraph(HNSWConfig{M: 2}.withDefaults())
	c.g.grow(len(c.items))
	for s := range c.items {
		c.graphInsert(s)
	}
	f.Add(encodeGraph(nil, "c", c))
	f.Fuzz(func(t *testing.T, payload []byte) {
		sg, err := decodeGraph(payload)
		if err != nil {
			return
		}
		c := fuzzCollection()
		c.g = newGraph(HNSWConfig{M: 2, ExactBelow: -1}.withDefaults())
		c.g.grow(len(c.items))
		if sg.dim == c.dim {
			c.loadGraph(sg)
		}
		for s := range c.items {
			if c.g.levels[s] < 0 {
				c.graphInsert(s)
			}
		}
		hits, err := c.search(context.Background(), c.vec(3), len(c.items)-1, nil)
		if err != nil || len(hits) != len(c.items)-1 {
			t.Fatalf("%d hits, %v", len(hits), err)
		}
	})
}
