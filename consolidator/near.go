package consolidator

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// The planner's pairwise rules (semantic duplicates, close facts to judge, episodic
// clusters) ask, for each memory of a set, which others have a cosine of at least a
// threshold with it. Below ExhaustiveBelow memories (or for a threshold too low for
// buckets to help) every pair is compared: the answer is exact. From ExhaustiveBelow
// on, comparing every pair is quadratic (a namespace of 100k memories took hours), so
// the candidates are found by random-hyperplane locality-sensitive hashing and each
// candidate is then compared exactly: a pair reported is always within the threshold,
// but a pair within it may, rarely, be missed (about 1% of the pairs right at the
// threshold, far fewer of the pairs well within it). The hashing is deterministic
// (fixed hyperplanes, drawn from a fixed seed, that depend on nothing but the vector's
// dimension) and depends on each vector alone, so the pairs found are the same for
// the same memories in any order.
//
// The work of a hashed search is bounded per item, so that a run plans a namespace of
// any size in time linear in it: templated memories ("user N ordered item M") are
// alike enough to share a bucket by the ten thousand, and comparing each with every
// other of its bucket took a run's 5 minutes and more at 100,000 memories (the run
// timed out before it applied any merge). A bucket is ordered by a locality key (sketch
// bits, a different rotation in each table, then position), and an item's candidates
// in a table are the window entries on each side of its own; at most maxCompared
// candidates of an item are compared exactly. In a bucket of at most 2·window+1
// items every pair is a candidate, as before; in a larger one a close pair far apart
// in every table's order is missed by this run, and the next run, its
// namespace changed by this one's merges, sees other neighbours.

// ExhaustiveBelow is the size of a set of memories from which the planner's pairwise
// searches use hashing instead of comparing every pair (see Plan).
const ExhaustiveBelow = 2048

const (
	// sketchBits is the number of hyperplanes a vector is hashed against.
	sketchBits  = 256
	sketchWords = sketchBits / 64
	// maxTables bounds the hash tables of one search, and minTableBits the bits of a
	// table's key below which buckets are too coarse to help (thresholds below about
	// 0.6): then every pair is compared.
	maxTables    = 64
	minTableBits = 8
	maxTableBits = 24
	// recall is the fraction of the pairs right at the threshold the tables are sized
	// to find, and slack the standard deviations of sketch distance a candidate may be
	// beyond the one the threshold implies before it is dropped without comparison.
	recall = 0.99
	slack  = 4.0
	// sketchSeed fixes the hyperplanes: changing it changes which rare pairs are missed.
	sketchSeed = 0x7a3c9d2e5b1f4086
	// window is how many entries on each side of an item's own in a bucket are its
	// candidates in that table, and maxCompared how many candidates of one item one
	// search compares exactly at most (see the bound above).
	window      = 32
	maxCompared = 256
)

// nbr is a neighbour in a near set: its position and cosine.
type nbr struct {
	j   int32
	cos float64
}

// nearSet answers, for the items of a set (in the caller's order), which others have a
// cosine of at least s with them.
//
// With hashing, a pair is a candidate when the items share a bucket in one of the
// tables; the candidates of an item are gathered when it is asked about, not stored
// for every pair: an item's candidates can be nearly the whole set (thousands of
// identical vectors share every bucket), and a set of all pairs grew as its square.
// What the searches hold is one key per item and table, and one item's candidates
// at a time.
type nearSet struct {
	pl    *planner
	items []*item
	s     float64
	// tables holds, per hash table, the key of each item with a sketch in the high
	// 32 bits and its position in the low ones, ordered by key, then locality key
	// (sub), then position: a bucket is a run of one key. nil when every pair is
	// compared on demand.
	tables  [][]uint64
	picks   [][]int // the sketch bits of each table's key
	sk      []*[sketchWords]uint64
	maxDist int
	// asked marks, with the number of the search, the candidates a search has
	// looked at already (an item shares buckets in several tables); found collects
	// its neighbours.
	asked  []uint32
	search uint32
	found  []nbr
}

// near prepares the searches within items at threshold s. It stops early (an empty
// set) when the plan's context is done.
func (pl *planner) near(items []*item, s float64) *nearSet {
	ns := &nearSet{pl: pl, items: items, s: s}
	tables, k := tablesFor(s)
	if len(items) < ExhaustiveBelow || !(s > 0) {
		return ns
	}
	if tables == 0 {
		// A threshold too low for buckets to find 99% of its pairs: they find
		// fewer, rather than compare every pair of a large set (quadratic).
		tables, k = maxTables, minTableBits
	}
	ns.sk = make([]*[sketchWords]uint64, len(items))
	for i, it := range items {
		if !pl.tick(1) {
			return ns
		}
		ns.sk[i] = pl.sketch(it)
	}
	q := math.Acos(s) / math.Pi
	ns.maxDist = int(sketchBits*q + slack*math.Sqrt(sketchBits*q*(1-q)))
	ns.asked = make([]uint32, len(items))
	ns.tables = make([][]uint64, tables)
	ns.picks = make([][]int, tables)
	for t := range tables {
		ns.picks[t] = tableBits(t, k)
		keys := make([]uint64, 0, len(items))
		for i := range items {
			if ns.sk[i] != nil {
				keys = append(keys, ns.key(t, i)<<32|uint64(i))
			}
		}
		if !pl.tick(len(keys)) {
			return ns
		}
		slices.SortFunc(keys, func(a, b uint64) int { return ns.order(t, a, b) })
		ns.tables[t] = keys
	}
	return ns
}

// sub is item i's locality key in table t: 64 of its sketch bits, a different word
// and rotation in each table, so that the items next to one another in a bucket
// share many hyperplanes' sides, and not the same ones in every table.
func (ns *nearSet) sub(t, i int) uint64 {
	return bits.RotateLeft64(ns.sk[i][t%sketchWords], -4*(t/sketchWords))
}

// order orders two entries of table t: by key, locality key, then position.
func (ns *nearSet) order(t int, a, b uint64) int {
	if c := cmp.Compare(a>>32, b>>32); c != 0 {
		return c
	}
	i, j := int(uint32(a)), int(uint32(b))
	if c := cmp.Compare(ns.sub(t, i), ns.sub(t, j)); c != 0 {
		return c
	}
	return cmp.Compare(i, j)
}

// key is item i's bucket in table t.
func (ns *nearSet) key(t, i int) uint64 {
	var key uint64
	for b, bit := range ns.picks[t] {
		key |= (ns.sk[i][bit/64] >> (bit % 64) & 1) << b
	}
	// The dimension (mod 256) is part of the key: vectors of different dimensions
	// are compared rarely (and never found close).
	return key | uint64(len(ns.items[i].m.Vector)%256)<<maxTableBits
}

// each calls f, in ascending position, for the items from position from on (but i)
// whose cosine with item i is at least s, skipping those skip says to (which it may
// say before any comparison). It stops when the plan's context is done.
func (ns *nearSet) each(i, from int, skip func(j int) bool, f func(j int, cos float64)) {
	if ns.tables != nil {
		ns.hashed(i, from, skip, f)
		return
	}
	a := ns.items[i]
	for j := from; j < len(ns.items); j++ {
		if j == i || skip(j) {
			continue
		}
		if !ns.pl.tick(1) {
			return
		}
		if c, ok := ns.pl.cos(a, ns.items[j]); ok && c >= ns.s {
			f(j, c)
		}
	}
}

// hashed is each through the tables: the candidates are the items from position
// from on within window entries of i in a bucket it shares with them, and whose
// sketches are close enough; the first maxCompared of them (tables in order, a
// window in its order) are compared.
func (ns *nearSet) hashed(i, from int, skip func(j int) bool, f func(j int, cos float64)) {
	if ns.sk[i] == nil {
		return
	}
	ns.search++
	if ns.search == 0 { // wrapped: no mark may look current
		clear(ns.asked)
		ns.search = 1
	}
	ns.asked[i] = ns.search
	ns.found = ns.found[:0]
	compared := 0
	for t, keys := range ns.tables {
		own := ns.key(t, i)<<32 | uint64(i)
		at, _ := slices.BinarySearchFunc(keys, own, func(e, target uint64) int { return ns.order(t, e, target) })
		for _, e := range keys[max(at-window, 0):min(at+window+1, len(keys))] {
			if e>>32 != own>>32 {
				continue // another bucket
			}
			if !ns.pl.tick(1) {
				return
			}
			j := int(uint32(e))
			if j < from || ns.asked[j] == ns.search {
				continue
			}
			ns.asked[j] = ns.search
			if skip(j) || distance(ns.sk[i], ns.sk[j]) > ns.maxDist {
				continue
			}
			if compared++; compared > maxCompared {
				break
			}
			if c, ok := ns.pl.cos(ns.items[i], ns.items[j]); ok && c >= ns.s {
				ns.found = append(ns.found, nbr{int32(j), c})
			}
		}
		if compared > maxCompared {
			break
		}
	}
	slices.SortFunc(ns.found, func(x, y nbr) int { return int(x.j) - int(y.j) })
	for _, n := range ns.found {
		f(int(n.j), n.cos)
	}
}

// tablesFor is the number of hash tables and bits of each for a search at threshold
// s, so that a pair right at s shares a bucket in at least one table with probability
// recall (were the tables independent); 0 tables: compare every pair.
func tablesFor(s float64) (tables, k int) {
	if s >= 1 {
		s = math.Nextafter(1, 0)
	}
	if !(s > 0) {
		return 0, 0
	}
	// A random hyperplane separates two vectors at angle θ with probability θ/π.
	p := 1 - math.Acos(s)/math.Pi
	perTable := 1 - math.Pow(1-recall, 1.0/maxTables) // the least a table may find
	k = min(int(math.Log(perTable)/math.Log(p)), maxTableBits)
	if k < minTableBits {
		return 0, 0
	}
	tables = int(math.Ceil(math.Log(1-recall) / math.Log(1-math.Pow(p, float64(k)))))
	return min(tables, maxTables), k
}

// tableBits are the k sketch bits that make table t's key: distinct, fixed.
func tableBits(t, k int) []int {
	r := splitmix(sketchSeed ^ uint64(t+1)*0x9e3779b97f4a7c15 ^ uint64(k)<<56)
	pick := make([]int, 0, k)
	for len(pick) < k {
		if b := int(r.next() % sketchBits); !slices.Contains(pick, b) {
			pick = append(pick, b)
		}
	}
	return pick
}

// sketch is the sign of it's vector against each hyperplane of its dimension; nil for
// a vector that cannot be compared (empty, zero, or not finite).
// It is computed once per item: the searches of several rules share it.
func (pl *planner) sketch(it *item) *[sketchWords]uint64 {
	v := it.m.Vector
	if it.sketch != nil || len(v) == 0 || it.norm == 0 || math.IsNaN(it.norm) || math.IsInf(it.norm, 0) {
		return it.sketch
	}
	hp := pl.planes[len(v)]
	if hp == nil {
		hp = newPlanes(len(v))
		if pl.planes == nil {
			pl.planes = map[int]*planes{}
		}
		pl.planes[len(v)] = hp
	}
	var out [sketchWords]uint64
	for h := range sketchBits {
		var sum float32
		for _, d := range hp.plus[h] {
			sum += v[d]
		}
		for _, d := range hp.minus[h] {
			sum -= v[d]
		}
		if sum > 0 {
			out[h/64] |= 1 << (h % 64)
		}
	}
	it.sketch = &out
	return it.sketch
}

// planes are sparse random hyperplanes of one dimension: each coordinate is +1 or −1
// with probability 1/8 each, else 0 (sums of additions only: the same bits on every
// platform).
type planes struct {
	plus, minus [sketchBits][]int32
}

func newPlanes(dim int) *planes {
	r := splitmix(sketchSeed ^ uint64(dim))
	hp := &planes{}
	for h := range sketchBits {
		for d := range dim {
			switch r.next() & 7 {
			case 0:
				hp.plus[h] = append(hp.plus[h], int32(d))
			case 1:
				hp.minus[h] = append(hp.minus[h], int32(d))
			}
		}
	}
	return hp
}

// distance is the Hamming distance of two sketches.
func distance(a, b *[sketchWords]uint64) int {
	n := 0
	for w := range a {
		n += bits.OnesCount64(a[w] ^ b[w])
	}
	return n
}

// splitmix is the SplitMix64 generator: fixed output for a seed, on every platform.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
