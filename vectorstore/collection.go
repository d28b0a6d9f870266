package vectorstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
)

// maxCollectionName is the longest collection name, in bytes (Milvus's limit).
const maxCollectionName = 255

// CheckCollectionName accepts names Milvus accepts too: a letter or underscore, then
// letters, digits and underscores, at most 255 bytes. Enforcing the stricter rule in
// the embedded store keeps code that works on a laptop working on a cluster.
func CheckCollectionName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty collection name", ErrInvalid)
	}
	if len(name) > maxCollectionName {
		return fmt.Errorf("%w: collection name longer than %d bytes", ErrInvalid, maxCollectionName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (i > 0 && '0' <= c && c <= '9')
		if !ok {
			return fmt.Errorf("%w: collection name %q: use letters, digits and underscores, starting with a letter or underscore", ErrInvalid, name)
		}
	}
	return nil
}

// CheckVector applies the vector rules of Store: a vector must be non-empty, finite and
// non-zero, or it fails with ErrInvalid. Every Store implementation checks vectors with it.
func CheckVector(v []float32) error {
	_, err := normalize(v)
	return err
}

// normalize checks a vector and returns it scaled to unit length. The norm is computed
// in float64 so that tiny or huge components neither underflow nor overflow.
func normalize(v []float32) ([]float32, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty vector", ErrInvalid)
	}
	var sum float64
	for i, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: vector component %d is %v", ErrInvalid, i, x)
		}
		sum += f * f
	}
	if sum == 0 {
		return nil, fmt.Errorf("%w: zero vector has no direction", ErrInvalid)
	}
	inv := 1 / math.Sqrt(sum)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, nil
}

// prepared is an Item that passed validation, with its own copies of the caller's data.
type prepared struct {
	item Item      // deep copy of the caller's item
	unit []float32 // item.Vector normalized
}

// prepareItems validates a batch independently of any stored state and copies it.
// It returns the batch's dimension (0 for an empty batch).
func prepareItems(items []Item) ([]prepared, int, error) {
	if len(items) == 0 {
		return nil, 0, nil
	}
	dim := len(items[0].Vector)
	out := make([]prepared, len(items))
	for i, it := range items {
		if it.ID == "" {
			return nil, 0, fmt.Errorf("%w: item %d has an empty ID", ErrInvalid, i)
		}
		unit, err := normalize(it.Vector)
		if err != nil {
			return nil, 0, fmt.Errorf("item %d (%q): %w", i, it.ID, err)
		}
		if len(it.Vector) != dim {
			return nil, 0, fmt.Errorf("%w: item %d (%q) has dimension %d, item 0 has %d", ErrDimension, i, it.ID, len(it.Vector), dim)
		}
		out[i] = prepared{
			item: Item{
				ID:       it.ID,
				Vector:   slices.Clone(it.Vector),
				Metadata: maps.Clone(it.Metadata),
				Text:     it.Text,
			},
			unit: unit,
		}
	}
	return out, dim, nil
}

// collection is the in-memory index of one collection: unit vectors packed in one
// slice for a cache-friendly scan, and the items they belong to, slot by slot.
//
// An exact collection keeps its slots dense (a delete moves the last item into the
// freed slot). An HNSW collection (stable is true) keeps an item in its slot for
// as long as it lives, because the slot is its node in the graph: a delete leaves a
// hole (an Item with an empty ID) that a later insert reuses.
type collection struct {
	dim   int
	units []float32 // len(items)*dim, slot i at [i*dim, (i+1)*dim)
	items []Item    // as upserted; Vector is the caller's (copied) vector
	slot  map[string]int

	stable bool
	free   []int                     // holes, reused last first
	meta   map[string]map[string]int // key -> value -> items holding it (stable only)
	g      *graph                    // nil while the log is replayed on Open
}

func newCollection(dim int) *collection {
	return &collection{dim: dim, slot: make(map[string]int)}
}

func newStableCollection(dim int) *collection {
	return &collection{dim: dim, slot: make(map[string]int), stable: true, meta: make(map[string]map[string]int)}
}

// upsertStable stores a batch in a stable collection, later items winning over
// earlier ones with the same ID, and keeps the graph (if built) in step. It returns
// the change in the estimated encoded size of the live items.
func (c *collection) upsertStable(batch []prepared) (delta int) {
	last := make(map[string]int, len(batch))
	for i, p := range batch {
		last[p.item.ID] = i
	}
	var dead map[int32]bool // replaced nodes whose vector changed
	var insert []int
	for i, p := range batch {
		if last[p.item.ID] != i {
			continue
		}
		delta += itemSize(p.item)
		if s, ok := c.slot[p.item.ID]; ok {
			old := c.items[s]
			delta -= itemSize(old)
			c.metaAdd(old.Metadata, -1)
			c.metaAdd(p.item.Metadata, 1)
			moved := !slicesEqual(c.vec(s), p.unit)
			c.items[s] = p.item
			if moved {
				if c.g != nil {
					if dead == nil {
						dead = make(map[int32]bool)
					}
					dead[int32(s)] = true
					insert = append(insert, s)
				}
				copy(c.vec(s), p.unit)
			}
			continue
		}
		var s int
		if n := len(c.free); n > 0 {
			s = c.free[n-1]
			c.free = c.free[:n-1]
			c.items[s] = p.item
			copy(c.vec(s), p.unit)
		} else {
			s = len(c.items)
			c.items = append(c.items, p.item)
			c.units = append(c.units, p.unit...)
		}
		c.slot[p.item.ID] = s
		c.metaAdd(p.item.Metadata, 1)
		insert = append(insert, s)
	}
	if c.g == nil {
		return delta
	}
	c.g.grow(len(c.items))
	if len(dead) > 0 {
		// The repair reads only live nodes' vectors, so the new vectors already in
		// the dead slots do no harm.
		c.graphRemove(dead)
	}
	for _, s := range insert {
		c.graphInsert(s)
	}
	return delta
}

// deleteStable removes items from a stable collection, leaving holes, and unlinks
// them from the graph. It returns the estimated encoded size removed.
func (c *collection) deleteStable(ids []string) (removed int) {
	dead := make(map[int32]bool, len(ids))
	for _, id := range ids {
		s, ok := c.slot[id]
		if !ok {
			continue
		}
		removed += itemSize(c.items[s])
		c.metaAdd(c.items[s].Metadata, -1)
		delete(c.slot, id)
		c.items[s] = Item{}
		c.free = append(c.free, s)
		dead[int32(s)] = true
	}
	if c.g != nil && len(dead) > 0 {
		c.graphRemove(dead)
	}
	return removed
}

func slicesEqual(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// upsert stores p, replacing any item with the same ID, and returns the estimated
// encoded size of the item it replaced (0 when none).
func (c *collection) upsert(p prepared) (replaced int) {
	if i, ok := c.slot[p.item.ID]; ok {
		replaced = itemSize(c.items[i])
		c.items[i] = p.item
		copy(c.units[i*c.dim:(i+1)*c.dim], p.unit)
		return replaced
	}
	c.slot[p.item.ID] = len(c.items)
	c.items = append(c.items, p.item)
	c.units = append(c.units, p.unit...)
	return 0
}

// delete removes id by moving the last slot into its place, and returns the estimated
// encoded size of the removed item, and whether it existed.
func (c *collection) delete(id string) (int, bool) {
	i, ok := c.slot[id]
	if !ok {
		return 0, false
	}
	size := itemSize(c.items[i])
	last := len(c.items) - 1
	if i != last {
		c.items[i] = c.items[last]
		copy(c.units[i*c.dim:(i+1)*c.dim], c.units[last*c.dim:(last+1)*c.dim])
		c.slot[c.items[i].ID] = i
	}
	c.items[last] = Item{}
	c.items = c.items[:last]
	c.units = c.units[:last*c.dim]
	delete(c.slot, id)
	return size, true
}

// ctxCheckEvery is how many items a search scans between checks of its context.
const ctxCheckEvery = 4096

// search returns the k items nearest unit (the normalized query) that match filter:
// from the graph when the collection has one and the search suits it, else (or when
// the graph finds fewer than k) by an exact scan.
func (c *collection) search(ctx context.Context, unit []float32, k int, filter map[string]string) ([]Hit, error) {
	if c.useGraph(k, filter) {
		ranked, ok, err := c.annSearch(ctx, unit, k, filter)
		if err != nil {
			return nil, err
		}
		if ok {
			return c.hits(ranked), nil
		}
	}
	ranked, err := c.scan(ctx, unit, k, filter)
	if err != nil {
		return nil, err
	}
	return c.hits(ranked), nil
}

// scan scores every item exactly: filter first, then cosine score against unit,
// keeping the best k in a bounded heap.
func (c *collection) scan(ctx context.Context, unit []float32, k int, filter map[string]string) ([]candidate, error) {
	n := len(c.items)
	h := topK{items: c.items, c: make([]candidate, 0, min(k, n))}
	for i := range n {
		if i%ctxCheckEvery == ctxCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("vectorstore: search: %w", err)
			}
		}
		if c.items[i].ID == "" { // a hole of a stable collection
			continue
		}
		if len(filter) > 0 && !matches(c.items[i].Metadata, filter) {
			continue
		}
		s := dot(unit, c.units[i*c.dim:(i+1)*c.dim])
		if len(h.c) == k && s < h.c[0].score {
			continue // cheaper than push for the common case
		}
		h.push(candidate{score: s, slot: i}, k)
	}
	return h.sorted(), nil
}

// hits copies the ranked items out.
func (c *collection) hits(ranked []candidate) []Hit {
	hits := make([]Hit, len(ranked))
	for i, r := range ranked {
		it := c.items[r.slot]
		hits[i] = Hit{
			Item: Item{
				ID:       it.ID,
				Vector:   slices.Clone(it.Vector),
				Metadata: maps.Clone(it.Metadata),
				Text:     it.Text,
			},
			Score: clampScore(r.score),
		}
	}
	return hits
}

// clampScore keeps rounding error from pushing a cosine outside [-1, 1].
func clampScore(s float32) float32 {
	return min(max(s, -1), 1)
}

func matches(meta, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := meta[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// dot is the inner product of two vectors of equal length, with four accumulators so
// the CPU can pipeline the multiply-adds.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

type candidate struct {
	score float32
	slot  int
}

// topK is a min-heap of the best candidates seen so far: the root is the worst of
// them, the one the next better candidate evicts.
type topK struct {
	items []Item
	c     []candidate
}

// better orders candidates: higher score first, then smaller ID.
func (h *topK) better(a, b candidate) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return h.items[a.slot].ID < h.items[b.slot].ID
}

func (h *topK) push(x candidate, k int) {
	if len(h.c) < k {
		h.c = append(h.c, x)
		h.up(len(h.c) - 1)
		return
	}
	if !h.better(x, h.c[0]) {
		return
	}
	h.c[0] = x
	h.down(0)
}

func (h *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.better(h.c[p], h.c[i]) { // parent must be worse than child
			break
		}
		h.c[p], h.c[i] = h.c[i], h.c[p]
		i = p
	}
}

func (h *topK) down(i int) {
	n := len(h.c)
	for {
		worst := i
		l, r := 2*i+1, 2*i+2
		if l < n && h.better(h.c[worst], h.c[l]) {
			worst = l
		}
		if r < n && h.better(h.c[worst], h.c[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h.c[i], h.c[worst] = h.c[worst], h.c[i]
		i = worst
	}
}

// sorted returns the candidates best first.
func (h *topK) sorted() []candidate {
	out := slices.Clone(h.c)
	slices.SortFunc(out, func(a, b candidate) int {
		switch {
		case h.better(a, b):
			return -1
		case h.better(b, a):
			return 1
		}
		return 0
	})
	return out
}
