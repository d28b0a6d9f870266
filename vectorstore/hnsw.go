package vectorstore

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
)

// Index selects how an Embedded store searches its collections.
type Index int

const (
	// IndexExact scores every item that matches the filter: results are exact and
	// never depend on index parameters; a search costs time linear in the collection.
	IndexExact Index = iota
	// IndexHNSW keeps a hierarchical navigable small world graph per collection
	// (Malkov and Yashunin, 2016): a search visits a few thousand items instead of all
	// of them, and returns approximate nearest neighbours (see HNSWConfig).
	IndexHNSW
)

func (i Index) String() string {
	switch i {
	case IndexExact:
		return "exact"
	case IndexHNSW:
		return "hnsw"
	}
	return fmt.Sprintf("Index(%d)", int(i))
}

// Defaults of HNSWConfig.
const (
	DefaultHNSWM          = 16
	DefaultEfConstruction = 100
	DefaultEfSearch       = 64
	DefaultExactBelow     = 2048
)

// maxHNSWLevel caps the level of a node; with M = 16 a level above 6 needs tens of
// millions of items.
const maxHNSWLevel = 16

// HNSWConfig tunes the graph of Config.Index = IndexHNSW. Zero fields take the
// defaults; changing M makes the next Open rebuild the graphs instead of loading them.
type HNSWConfig struct {
	// M is the number of links a node gets per layer (2*M on the bottom layer).
	// More links give better recall, more memory and slower inserts. 0 means
	// DefaultHNSWM; at least 2.
	M int
	// EfConstruction is the width of the search that finds a new node's links.
	// 0 means DefaultEfConstruction.
	EfConstruction int
	// EfSearch is the width of a query's search on the bottom layer (at least K).
	// Larger is slower and finds more of the true neighbours. 0 means DefaultEfSearch.
	EfSearch int
	// ExactBelow: a collection with at most this many items is searched exactly
	// (scanning is as fast as the graph there). 0 means DefaultExactBelow; a negative
	// value always uses the graph.
	ExactBelow int
}

func (h HNSWConfig) validate() error {
	if h.M != 0 && (h.M < 2 || h.M > 256) {
		return fmt.Errorf("vectorstore: HNSW.M %d must be between 2 and 256 (or 0 for the default)", h.M)
	}
	if h.EfConstruction < 0 || h.EfSearch < 0 {
		return fmt.Errorf("vectorstore: HNSW.EfConstruction %d and HNSW.EfSearch %d must not be negative", h.EfConstruction, h.EfSearch)
	}
	return nil
}

func (h HNSWConfig) withDefaults() HNSWConfig {
	if h.M == 0 {
		h.M = DefaultHNSWM
	}
	if h.EfConstruction == 0 {
		h.EfConstruction = DefaultEfConstruction
	}
	h.EfConstruction = max(h.EfConstruction, h.M)
	if h.EfSearch == 0 {
		h.EfSearch = DefaultEfSearch
	}
	if h.ExactBelow == 0 {
		h.ExactBelow = DefaultExactBelow
	}
	return h
}

// graph is the HNSW index of one collection. Its nodes are the collection's slots: a
// slot's vector is the node's vector. A slot without a node (a freed slot, or one
// not inserted yet) has level -1 and no links. Deleted nodes are unlinked at once
// (their in-neighbours get new links), so every reachable node is a live item.
//
// The graph is changed only by writers holding the collection exclusively; searches
// read it concurrently.
type graph struct {
	cfg    HNSWConfig
	ml     float64 // level multiplier 1/ln(M)
	levels []int8  // per slot; -1: no node
	// Links on the bottom layer, where searches spend their time, are packed in one
	// slice: slot s owns base[s*stride : (s+1)*stride], its link count then up to
	// 2*M links. Walking them costs no pointer chase, and a delete's repair scans
	// them in order.
	base   []int32
	stride int
	upper  [][][]int32 // per slot, layers 1..level at index l-1; nil for level 0
	entry  int32       // entry point; -1 when the graph is empty
	top    int         // level of the entry point

	changes int // nodes inserted or removed since the graph was last saved

	scratch sync.Pool // *scratch
}

func newGraph(cfg HNSWConfig) *graph {
	return &graph{cfg: cfg, ml: 1 / math.Log(float64(cfg.M)), entry: -1, stride: 2*cfg.M + 1}
}

// linksAt returns the links of slot x on layer l; the caller must not append to it.
func (g *graph) linksAt(x, l int) []int32 {
	if l == 0 {
		b := x * g.stride
		return g.base[b+1 : b+1+int(g.base[b]) : b+g.stride]
	}
	return g.upper[x][l-1]
}

// setLinks replaces the links of slot x on layer l with lst (which may be the slice
// linksAt returned). On layer 0 lst is copied; above, the graph keeps lst.
func (g *graph) setLinks(x, l int, lst []int32) {
	if l == 0 {
		b := x * g.stride
		g.base[b] = int32(copy(g.base[b+1:b+g.stride], lst))
		return
	}
	g.upper[x][l-1] = lst
}

// clearNode removes slot x's node.
func (g *graph) clearNode(x int) {
	g.levels[x] = -1
	g.base[x*g.stride] = 0
	g.upper[x] = nil
}

// initNode makes slot x a node of the given level with no links.
func (g *graph) initNode(x, level int) {
	g.levels[x] = int8(level)
	g.base[x*g.stride] = 0
	g.upper[x] = nil
	if level > 0 {
		g.upper[x] = make([][]int32, level)
	}
}

// maxLinks is the most links a node keeps on layer l.
func (g *graph) maxLinks(l int) int {
	if l == 0 {
		return 2 * g.cfg.M
	}
	return g.cfg.M
}

// levelOf draws a node's level from a hash of its ID, so the graph built from the
// same operations is the same graph, run after run.
func (g *graph) levelOf(id string) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	x := h.Sum64()
	// splitmix64 finalizer: FNV's low bits are weak for short IDs.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	u := (float64(x>>11) + 1) / (1 << 53) // (0, 1]
	return min(int(-math.Log(u)*g.ml), maxHNSWLevel)
}

// grow makes room for slots up to n-1.
func (g *graph) grow(n int) {
	for len(g.levels) < n {
		g.levels = append(g.levels, -1)
		g.base = append(g.base, make([]int32, g.stride)...)
		g.upper = append(g.upper, nil)
	}
}

// scratch is the per-search working memory: visit marks by slot (a slot is visited
// when its mark equals gen), the candidate queue and the result heap.
type scratch struct {
	mark []uint32
	gen  uint32
	cand []candidate // max-heap by score
	res  []candidate
	sel  []candidate
}

func (g *graph) getScratch(n int) *scratch {
	sc, _ := g.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	if len(sc.mark) < n {
		sc.mark = make([]uint32, n+n/4)
		sc.gen = 0
	}
	sc.gen++
	if sc.gen == 0 { // wrapped: old marks could collide
		clear(sc.mark)
		sc.gen = 1
	}
	return sc
}

func (g *graph) putScratch(sc *scratch) { g.scratch.Put(sc) }

func (sc *scratch) visited(i int) bool { return sc.mark[i] == sc.gen }
func (sc *scratch) visit(i int)        { sc.mark[i] = sc.gen }

// nextGen starts a new set of visit marks within one operation.
func (sc *scratch) nextGen() {
	sc.gen++
	if sc.gen == 0 {
		clear(sc.mark)
		sc.gen = 1
	}
}

func candPush(h []candidate, x candidate) []candidate {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].score >= h[i].score {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func candPop(h []candidate) ([]candidate, candidate) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		best := i
		l, r := 2*i+1, 2*i+2
		if l < n && h[l].score > h[best].score {
			best = l
		}
		if r < n && h[r].score > h[best].score {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	return h, top
}

func (c *collection) vec(slot int) []float32 {
	return c.units[slot*c.dim : (slot+1)*c.dim]
}

// greedy walks layer l from ep to the node nearest q that it can reach by always
// moving to a nearer neighbour.
func (c *collection) greedy(q []float32, ep candidate, l int) candidate {
	for changed := true; changed; {
		changed = false
		for _, nb := range c.g.linksAt(ep.slot, l) {
			if s := dot(q, c.vec(int(nb))); s > ep.score {
				ep = candidate{score: s, slot: int(nb)}
				changed = true
			}
		}
	}
	return ep
}

// searchLayer is the beam search of HNSW on layer l: it returns (as an unordered
// heap, in sc.res) up to ef of the nodes nearest q, exploring from entry. ctx is
// checked every so often.
func (c *collection) searchLayer(ctx context.Context, q []float32, entry []candidate, ef, l int,
	sc *scratch) ([]candidate, error) {
	g := c.g
	sc.cand = sc.cand[:0]
	res := topK{items: c.items, c: sc.res[:0]}
	for _, e := range entry {
		if sc.visited(e.slot) {
			continue
		}
		sc.visit(e.slot)
		sc.cand = candPush(sc.cand, e)
		res.push(e, ef)
	}
	steps := 0
	for len(sc.cand) > 0 {
		var cur candidate
		sc.cand, cur = candPop(sc.cand)
		if len(res.c) >= ef && cur.score < res.c[0].score {
			break
		}
		if steps++; steps%256 == 0 {
			if err := ctx.Err(); err != nil {
				sc.res = res.c
				return nil, fmt.Errorf("vectorstore: search: %w", err)
			}
		}
		for _, nb32 := range g.linksAt(cur.slot, l) {
			nb := int(nb32)
			if sc.visited(nb) {
				continue
			}
			sc.visit(nb)
			s := dot(q, c.vec(nb))
			if len(res.c) < ef || s >= res.c[0].score {
				x := candidate{score: s, slot: nb}
				sc.cand = candPush(sc.cand, x)
				res.push(x, ef)
			}
		}
	}
	sc.res = res.c
	return res.c, nil
}

// byScoreThenSlot orders candidates best first; equal scores by slot, so that graph
// construction is deterministic.
func byScoreThenSlot(a, b candidate) int {
	if a.score != b.score {
		return cmp.Compare(b.score, a.score)
	}
	return cmp.Compare(a.slot, b.slot)
}

// selectNeighbours is the HNSW neighbour heuristic: from candidates sorted best
// first (score = similarity to the node being linked), keep a candidate only if it
// is nearer to that node than to every candidate kept before it. This keeps links
// pointing in diverse directions, which is what lets a search leave a cluster.
//
// A candidate of the same direction as one kept (a copy of its vector) is not
// kept either, though it is no nearer to it than to the node when the node is a
// copy too: it points nowhere new. Without that, copies of one vector (a footer
// every document repeats) would fill each other's links, and a search that
// reached them could not leave them.
func (c *collection) selectNeighbours(cands []candidate, m int, out []int32) []int32 {
	out = out[:0]
	for _, x := range cands {
		if len(out) >= m {
			break
		}
		xv := c.vec(x.slot)
		good := true
		for _, r := range out {
			if s := dot(xv, c.vec(int(r))); s > x.score || s >= sameDirection {
				good = false
				break
			}
		}
		if good {
			out = append(out, int32(x.slot))
		}
	}
	return out
}

// sameDirection is the cosine from which two unit vectors count as one direction
// (selectNeighbours): a copy's, up to float32 rounding.
const sameDirection = 1 - 1e-6

// graphInsert links the item at slot into the graph.
func (c *collection) graphInsert(slot int) {
	g := c.g
	g.grow(len(c.items))
	level := g.levelOf(c.items[slot].ID)
	g.initNode(slot, level)
	g.changes++
	if g.entry < 0 {
		g.entry, g.top = int32(slot), level
		return
	}
	q := c.vec(slot)
	sc := g.getScratch(len(c.items))
	defer g.putScratch(sc)
	ep := candidate{score: dot(q, c.vec(int(g.entry))), slot: int(g.entry)}
	for l := g.top; l > level; l-- {
		ep = c.greedy(q, ep, l)
	}
	entry := []candidate{ep}
	for l := min(level, g.top); l >= 0; l-- {
		sc.nextGen()
		w, _ := c.searchLayer(context.Background(), q, entry, g.cfg.EfConstruction, l, sc) // cannot fail
		sc.sel = append(sc.sel[:0], w...)
		slices.SortFunc(sc.sel, byScoreThenSlot)
		nbrs := c.selectNeighbours(sc.sel, g.cfg.M, make([]int32, 0, g.maxLinks(l)+1))
		g.setLinks(slot, l, nbrs)
		for _, nb := range nbrs {
			c.addLink(int(nb), slot, l)
		}
		entry = append(entry[:0], sc.sel...)
	}
	if level > g.top {
		g.entry, g.top = int32(slot), level
	}
}

// addLink adds a link from node to target on layer l, pruning node's links with the
// heuristic when they overflow.
func (c *collection) addLink(node, target, l int) {
	g := c.g
	lst := g.linksAt(node, l)
	if len(lst) < g.maxLinks(l) {
		g.setLinks(node, l, append(lst, int32(target)))
		return
	}
	nv := c.vec(node)
	cands := make([]candidate, 0, len(lst)+1)
	for _, x := range lst {
		cands = append(cands, candidate{score: dot(nv, c.vec(int(x))), slot: int(x)})
	}
	cands = append(cands, candidate{score: dot(nv, c.vec(target)), slot: target})
	slices.SortFunc(cands, byScoreThenSlot)
	g.setLinks(node, l, c.selectNeighbours(cands, g.maxLinks(l), lst[:0:len(lst)]))
}

// deadLink reports a link to a dead node: a negative one (a node of a saved graph
// whose item is gone) or one marked dead.
func deadLink(mark []bool, x int32) bool { return x < 0 || (mark != nil && mark[x]) }

// graphRepair unlinks dead nodes: every live node that links to a dead one on a
// layer gets its links on that layer chosen again (by the heuristic) from its live
// links and the live links of the dead nodes it linked to. Dead links are those
// deadLink reports; deadLinks returns a dead node's links on a layer. The entry point
// moves to a live node of the highest level when it died. Dead slots keep their
// levels and links: the caller clears them.
func (c *collection) graphRepair(mark []bool, deadLinks func(d int32, l int) []int32) {
	isDead := func(x int32) bool { return deadLink(mark, x) }
	g := c.g
	sc := g.getScratch(len(c.items))
	defer g.putScratch(sc)
	var cands []candidate
	for y := range g.levels {
		if g.levels[y] < 0 || deadLink(mark, int32(y)) {
			continue
		}
		for l := 0; l <= int(g.levels[y]); l++ {
			lst := g.linksAt(y, l)
			hit := false
			for _, x := range lst {
				if deadLink(mark, x) {
					hit = true
					break
				}
			}
			if !hit {
				continue
			}
			yv := c.vec(y)
			sc.nextGen()
			sc.visit(y)
			cands = cands[:0]
			add := func(x int32) {
				if isDead(x) || sc.visited(int(x)) {
					return
				}
				sc.visit(int(x))
				cands = append(cands, candidate{score: dot(yv, c.vec(int(x))), slot: int(x)})
			}
			for _, x := range lst {
				if !isDead(x) {
					add(x)
				}
			}
			for _, d := range lst {
				if isDead(d) {
					for _, x := range deadLinks(d, l) {
						add(x)
					}
				}
			}
			slices.SortFunc(cands, byScoreThenSlot)
			g.setLinks(y, l, c.selectNeighbours(cands, g.maxLinks(l), lst[:0:len(lst)]))
		}
	}
	if g.entry >= 0 && !isDead(g.entry) {
		return
	}
	g.entry, g.top = -1, 0
	for y, lv := range g.levels {
		if lv >= 0 && !isDead(int32(y)) && (g.entry < 0 || int(lv) > g.top) {
			g.entry, g.top = int32(y), int(lv)
		}
	}
}

// graphRemove unlinks the nodes at the dead slots, whose links are still in place.
func (c *collection) graphRemove(dead map[int32]bool) {
	g := c.g
	// The repair asks about every link of the graph: a slice answers faster than the map.
	mark := make([]bool, len(g.levels))
	for d := range dead {
		mark[d] = true
	}
	deadLinks := func(d int32, l int) []int32 {
		if l <= int(g.levels[d]) {
			return g.linksAt(int(d), l)
		}
		return nil
	}
	c.graphRepair(mark, deadLinks)
	for d := range dead {
		if int(d) < len(g.levels) && g.levels[d] >= 0 {
			g.clearNode(int(d))
			g.changes++
		}
	}
}

// annSearch searches the graph for the k items nearest unit that match filter. It
// returns them ranked, or ok false when it cannot vouch for the result (fewer than
// k found): the caller then scans exactly.
func (c *collection) annSearch(ctx context.Context, unit []float32, k int, filter map[string]string) ([]candidate, bool, error) {
	g := c.g
	if g.entry < 0 {
		return nil, false, nil
	}
	ef := max(g.cfg.EfSearch, k)
	sc := g.getScratch(len(c.items))
	defer g.putScratch(sc)
	ep := candidate{score: dot(unit, c.vec(int(g.entry))), slot: int(g.entry)}
	for l := g.top; l > 0; l-- {
		ep = c.greedy(unit, ep, l)
	}
	var w []candidate
	var err error
	if len(filter) == 0 {
		w, err = c.searchLayer(ctx, unit, []candidate{ep}, ef, 0, sc)
	} else {
		// Widen the beam by the share of items the filter may keep, so that it scores
		// about as many matching items as an unfiltered beam scores items.
		m := max(c.filterCount(filter), 1)
		ef = max(ef, min(k*len(c.slot)/m, len(c.slot)))
		w, err = c.searchFiltered(ctx, unit, ep, ef, k, filter, sc)
	}
	if err != nil {
		return nil, false, err
	}
	if len(w) < k {
		return nil, false, nil
	}
	h := topK{items: c.items, c: w}
	ranked := h.sorted()[:k]
	if c.copiesCut(ranked) {
		return nil, false, nil
	}
	return ranked, true, nil
}

// copiesCut reports whether ranked (best first) holds copies of one vector and,
// below them, items less near: the graph links a copy to one other copy only
// (selectNeighbours), so the search may have missed some of the copies, which
// rank above those items. The caller then scans exactly.
func (c *collection) copiesCut(ranked []candidate) bool {
	last := ranked[len(ranked)-1].score
	for i := 0; i+1 < len(ranked); i++ {
		a, b := ranked[i], ranked[i+1]
		if a.score > last && dot(c.vec(a.slot), c.vec(b.slot)) >= sameDirection {
			return true
		}
	}
	return false
}

// searchFiltered is the bottom-layer search of a filtered query: the beam (the ef
// nodes nearest q, matching or not) steers and stops the walk as in an unfiltered
// search, and the k nearest matching nodes among all the nodes it scores are kept.
// Walking on non-matching nodes keeps the graph connected for the query; keeping
// only matches in the beam instead would make it explore far past the neighbourhood
// of q whenever matches are sparse there.
func (c *collection) searchFiltered(ctx context.Context, q []float32, ep candidate, ef, k int,
	filter map[string]string, sc *scratch) ([]candidate, error) {
	g := c.g
	sc.cand = append(sc.cand[:0], ep)
	beam := topK{items: c.items, c: sc.res[:0]}
	found := topK{items: c.items, c: sc.sel[:0]}
	sc.visit(ep.slot)
	beam.push(ep, ef)
	if matches(c.items[ep.slot].Metadata, filter) {
		found.push(ep, k)
	}
	steps := 0
	for len(sc.cand) > 0 {
		var cur candidate
		sc.cand, cur = candPop(sc.cand)
		if len(beam.c) >= ef && cur.score < beam.c[0].score {
			break
		}
		if steps++; steps%256 == 0 {
			if err := ctx.Err(); err != nil {
				sc.res, sc.sel = beam.c, found.c
				return nil, fmt.Errorf("vectorstore: search: %w", err)
			}
		}
		for _, nb32 := range g.linksAt(cur.slot, 0) {
			nb := int(nb32)
			if sc.visited(nb) {
				continue
			}
			sc.visit(nb)
			x := candidate{score: dot(q, c.vec(nb)), slot: nb}
			if (len(found.c) < k || x.score >= found.c[0].score) && matches(c.items[nb].Metadata, filter) {
				found.push(x, k)
			}
			if len(beam.c) < ef || x.score >= beam.c[0].score {
				sc.cand = candPush(sc.cand, x)
				beam.push(x, ef)
			}
		}
	}
	sc.res, sc.sel = beam.c, found.c
	return found.c, nil
}

// filterCount bounds how many items match filter from above: the fewest items that
// hold any one of its pairs.
func (c *collection) filterCount(filter map[string]string) int {
	n := len(c.slot)
	for k, v := range filter {
		n = min(n, c.meta[k][v])
	}
	return n
}

func (c *collection) metaAdd(meta map[string]string, delta int) {
	for k, v := range meta {
		vals := c.meta[k]
		if vals == nil {
			vals = make(map[string]int)
			c.meta[k] = vals
		}
		vals[v] += delta
		if vals[v] == 0 {
			delete(vals, v)
			if len(vals) == 0 {
				delete(c.meta, k)
			}
		}
	}
}

// filterExactShare: a filter that matches fewer than 1/filterExactShare of the items
// is answered by an exact scan; the graph would walk through too many rejected nodes.
const filterExactShare = 50

// useGraph decides between the graph and an exact scan for one search.
func (c *collection) useGraph(k int, filter map[string]string) bool {
	g := c.g
	n := len(c.slot)
	if g == nil || g.entry < 0 || n <= g.cfg.ExactBelow || k >= n {
		return false
	}
	if len(filter) > 0 {
		m := c.filterCount(filter)
		if m <= k || m*filterExactShare < n {
			return false
		}
	}
	return true
}
