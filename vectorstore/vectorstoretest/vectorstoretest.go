// Package vectorstoretest is the conformance suite of the vectorstore.Store seam. Every
// implementation runs it, so the embedded store and Milvus cannot drift apart:
//
//	func TestStore(t *testing.T) {
//		vectorstoretest.Run(t, vectorstoretest.Features{Reopen: reopen}, newStore)
//	}
//
// Scores are checked against cosine similarity computed in float64 by brute force over
// random vectors drawn from a fixed seed, so a failure reproduces.
package vectorstoretest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
)

// Features describes what the Store under test can do; the suite skips what it cannot.
type Features struct {
	// Reopen, when set, closes s and returns a new Store over the same data. The suite
	// then checks that everything written before the close is there after it. Nil
	// (a memory-only store) skips the persistence tests.
	Reopen func(t *testing.T, s vectorstore.Store) vectorstore.Store
	// ScoreTolerance is the largest accepted difference between a returned score and
	// the exact cosine. 0 means 1e-5.
	ScoreTolerance float64
}

// Run runs the suite. newStore must return a new, empty store for each call (for a
// shared server: its own database or name prefix) and close it in t.Cleanup. If the
// store implements io.Closer, the suite also checks that Close is idempotent and that
// a closed store fails with vectorstore.ErrClosed.
func Run(t *testing.T, f Features, newStore func(t *testing.T) vectorstore.Store) {
	if f.ScoreTolerance == 0 {
		f.ScoreTolerance = 1e-5
	}
	s := &suite{f: f, newStore: newStore}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"NearestNeighbours", s.nearestNeighbours},
		{"KLargerThanCollection", s.kLargerThanCollection},
		{"TiesBreakByID", s.tiesBreakByID},
		{"FilterBeforeRanking", s.filterBeforeRanking},
		{"UpsertReplaces", s.upsertReplaces},
		{"DuplicateIDInBatchLastWins", s.duplicateIDInBatch},
		{"Delete", s.delete},
		{"UnknownCollection", s.unknownCollection},
		{"EmptyBatch", s.emptyBatch},
		{"DimensionMismatch", s.dimensionMismatch},
		{"InvalidInput", s.invalidInput},
		{"PoisonItemsParked", s.poisonItemsParked},
		{"CollectionsIsolated", s.collectionsIsolated},
		{"CallerMemoryNotShared", s.callerMemory},
		{"Concurrent", s.concurrent},
		{"ContextCancelled", s.contextCancelled},
		{"Close", s.close},
		{"Persistence", s.persistence},
		{"PersistenceAfterFailedWrites", s.persistenceAfterFailures},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	f        Features
	newStore func(t *testing.T) vectorstore.Store
}

// ctx returns a context that ends with the test, with a deadline so nothing hangs.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func randVec(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// cosine is the reference similarity, in float64.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	return ab / math.Sqrt(aa*bb)
}

type scored struct {
	id    string
	score float64
}

// bruteForce ranks items by exact cosine to q, best first, ties by ID.
func bruteForce(items []vectorstore.Item, q []float32, k int, filter map[string]string) []scored {
	var out []scored
	for _, it := range items {
		if !matches(it.Metadata, filter) {
			continue
		}
		out = append(out, scored{it.ID, cosine(it.Vector, q)})
	}
	slices.SortFunc(out, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	return out[:min(k, len(out))]
}

func matches(meta, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := meta[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// checkRanking compares hits with the exact ranking. A hit may differ from the
// expected ID at a position only where the two exact scores are within tolerance (a
// near-tie that float32 arithmetic may order either way).
func (s *suite) checkRanking(t *testing.T, got []vectorstore.Hit, want []scored, items []vectorstore.Item, q []float32) {
	t.Helper()
	tol := s.f.ScoreTolerance
	if len(got) != len(want) {
		t.Fatalf("got %d hits, want %d", len(got), len(want))
	}
	byID := make(map[string]vectorstore.Item, len(items))
	for _, it := range items {
		byID[it.ID] = it
	}
	seen := make(map[string]bool)
	for i, h := range got {
		if seen[h.ID] {
			t.Fatalf("hit %d: ID %q returned twice", i, h.ID)
		}
		seen[h.ID] = true
		it, ok := byID[h.ID]
		if !ok {
			t.Fatalf("hit %d: unknown ID %q", i, h.ID)
		}
		exact := cosine(it.Vector, q)
		if math.Abs(float64(h.Score)-exact) > tol {
			t.Errorf("hit %d (%s): score %v, exact cosine %v", i, h.ID, h.Score, exact)
		}
		if h.ID != want[i].id && math.Abs(exact-want[i].score) > 2*tol {
			t.Errorf("hit %d: got %s (cosine %v), want %s (cosine %v)", i, h.ID, exact, want[i].id, want[i].score)
		}
		if i > 0 {
			prev := got[i-1]
			if prev.Score < h.Score || (prev.Score == h.Score && prev.ID > h.ID) {
				t.Errorf("hits %d and %d out of order: (%s %v) before (%s %v)", i-1, i, prev.ID, prev.Score, h.ID, h.Score)
			}
		}
		checkItem(t, h.Item, it)
	}
}

// checkItem compares a returned item with the stored one (nil and empty metadata are
// equal: a backend may not keep the difference).
func checkItem(t *testing.T, got, want vectorstore.Item) {
	t.Helper()
	if got.ID != want.ID || got.Text != want.Text || !slices.Equal(got.Vector, want.Vector) ||
		!maps.Equal(got.Metadata, want.Metadata) {
		t.Errorf("item %q:\n got  %+v\n want %+v", want.ID, got, want)
	}
}

func (s *suite) upsert(t *testing.T, st vectorstore.Store, coll string, items []vectorstore.Item) {
	t.Helper()
	if err := st.Upsert(ctx(t), coll, items); err != nil {
		t.Fatalf("Upsert(%s, %d items): %v", coll, len(items), err)
	}
}

func (s *suite) search(t *testing.T, st vectorstore.Store, coll string, q vectorstore.Query) []vectorstore.Hit {
	t.Helper()
	hits, err := st.Search(ctx(t), coll, q)
	if err != nil {
		t.Fatalf("Search(%s, K=%d): %v", coll, q.K, err)
	}
	return hits
}

// dumpK is large enough to return every item of the collections the suite builds.
const dumpK = 10000

// dump returns every item of a collection by ID, found with a search of dimension dim.
func (s *suite) dump(t *testing.T, st vectorstore.Store, coll string, dim int) map[string]vectorstore.Item {
	t.Helper()
	q := make([]float32, dim)
	q[0] = 1
	out := make(map[string]vectorstore.Item)
	for _, h := range s.search(t, st, coll, vectorstore.Query{Vector: q, K: dumpK}) {
		out[h.ID] = h.Item
	}
	return out
}

func checkDump(t *testing.T, got map[string]vectorstore.Item, want []vectorstore.Item) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("collection holds %d items (%v), want %d", len(got), slices.Sorted(maps.Keys(got)), len(want))
	}
	for _, w := range want {
		g, ok := got[w.ID]
		if !ok {
			t.Errorf("item %q missing", w.ID)
			continue
		}
		checkItem(t, g, w)
	}
}

func randItems(rng *rand.Rand, prefix string, n, dim int) []vectorstore.Item {
	items := make([]vectorstore.Item, n)
	for i := range items {
		items[i] = vectorstore.Item{
			ID:       fmt.Sprintf("%s%04d", prefix, i),
			Vector:   randVec(rng, dim),
			Metadata: map[string]string{"group": fmt.Sprint(i % 10), "parity": []string{"even", "odd"}[i%2]},
			Text:     fmt.Sprintf("text of %s%04d", prefix, i),
		}
	}
	return items
}

func unitVec(dim, axis int) []float32 {
	v := make([]float32, dim)
	v[axis] = 1
	return v
}

func (s *suite) nearestNeighbours(t *testing.T) {
	st := s.newStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n, dim = 300, 24
	items := randItems(rng, "doc", n, dim)
	for i := 0; i < n; i += 50 {
		s.upsert(t, st, "nn", items[i:i+50])
	}
	for range 20 {
		q := randVec(rng, dim)
		got := s.search(t, st, "nn", vectorstore.Query{Vector: q, K: 10})
		s.checkRanking(t, got, bruteForce(items, q, 10, nil), items, q)
	}
	// A stored vector (scaled) finds itself first with score 1.
	q := slices.Clone(items[123].Vector)
	for i := range q {
		q[i] *= 3
	}
	got := s.search(t, st, "nn", vectorstore.Query{Vector: q, K: 1})
	if len(got) != 1 || got[0].ID != items[123].ID || math.Abs(float64(got[0].Score)-1) > s.f.ScoreTolerance {
		t.Errorf("self search: got %+v, want %s with score 1", got, items[123].ID)
	}
	// The opposite direction scores -1.
	for i := range q {
		q[i] = -q[i]
	}
	got = s.search(t, st, "nn", vectorstore.Query{Vector: q, K: n})
	if last := got[len(got)-1]; last.ID != items[123].ID || math.Abs(float64(last.Score)+1) > s.f.ScoreTolerance {
		t.Errorf("opposite search: last hit %s %v, want %s with score -1", last.ID, last.Score, items[123].ID)
	}
}

func (s *suite) kLargerThanCollection(t *testing.T) {
	st := s.newStore(t)
	rng := rand.New(rand.NewPCG(3, 4))
	items := randItems(rng, "k", 7, 8)
	s.upsert(t, st, "small", items)
	q := randVec(rng, 8)
	got := s.search(t, st, "small", vectorstore.Query{Vector: q, K: 100})
	s.checkRanking(t, got, bruteForce(items, q, 100, nil), items, q)
}

func (s *suite) tiesBreakByID(t *testing.T) {
	st := s.newStore(t)
	var items []vectorstore.Item
	for _, id := range []string{"c", "a", "d", "b"} {
		items = append(items, vectorstore.Item{ID: id, Vector: []float32{1, 2, 3}})
	}
	items = append(items, vectorstore.Item{ID: "0-far", Vector: []float32{-1, 0, 0}})
	s.upsert(t, st, "ties", items)
	for k, want := range map[int][]string{2: {"a", "b"}, 4: {"a", "b", "c", "d"}, 5: {"a", "b", "c", "d", "0-far"}} {
		var ids []string
		for _, h := range s.search(t, st, "ties", vectorstore.Query{Vector: []float32{2, 4, 6}, K: k}) {
			ids = append(ids, h.ID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("K=%d: got %v, want %v", k, ids, want)
		}
	}
}

func (s *suite) filterBeforeRanking(t *testing.T) {
	st := s.newStore(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const dim = 16
	items := randItems(rng, "f", 400, dim)
	// Decoys: identical to the query and tagged differently. Ranking first and
	// filtering after would return only decoys, then nothing.
	q := randVec(rng, dim)
	for i := range 50 {
		items = append(items, vectorstore.Item{ID: fmt.Sprintf("decoy%02d", i), Vector: q,
			Metadata: map[string]string{"group": "decoy"}})
	}
	items = append(items, vectorstore.Item{ID: "nometa", Vector: q})
	for i := 0; i < len(items); i += 100 {
		s.upsert(t, st, "filtered", items[i:min(i+100, len(items))])
	}
	for _, filter := range []map[string]string{
		{"group": "3"},
		{"group": "4", "parity": "even"},
		{"parity": "odd"},
		nil,
		{},
	} {
		got := s.search(t, st, "filtered", vectorstore.Query{Vector: q, K: 5, Filter: filter})
		want := bruteForce(items, q, 5, filter)
		if len(want) != 5 {
			t.Fatalf("test setup: filter %v matches %d items", filter, len(want))
		}
		for _, h := range got {
			if !matches(h.Metadata, filter) {
				t.Errorf("filter %v: hit %s has metadata %v", filter, h.ID, h.Metadata)
			}
		}
		s.checkRanking(t, got, want, items, q)
	}
	// Every item of a group, even with K far above it.
	got := s.search(t, st, "filtered", vectorstore.Query{Vector: q, K: 1000, Filter: map[string]string{"group": "7"}})
	if len(got) != 40 {
		t.Errorf("group 7 with K=1000: %d hits, want 40", len(got))
	}
	// Filters that match nothing: an absent value, an absent key, a contradiction.
	for _, filter := range []map[string]string{
		{"group": "nope"},
		{"color": "red"},
		{"group": "4", "parity": "odd"},
		{"group": ""},
	} {
		if got := s.search(t, st, "filtered", vectorstore.Query{Vector: q, K: 5, Filter: filter}); len(got) != 0 {
			t.Errorf("filter %v: %d hits, want none", filter, len(got))
		}
	}
}

func (s *suite) upsertReplaces(t *testing.T) {
	st := s.newStore(t)
	s.upsert(t, st, "replace", []vectorstore.Item{
		{ID: "x", Vector: []float32{1, 0, 0}, Metadata: map[string]string{"old": "1", "shared": "a"}, Text: "old text"},
		{ID: "y", Vector: []float32{0, 1, 0}, Text: "y"},
	})
	newX := vectorstore.Item{ID: "x", Vector: []float32{0, 0, 2}, Metadata: map[string]string{"shared": "b"}, Text: "new text"}
	s.upsert(t, st, "replace", []vectorstore.Item{newX})

	got := s.search(t, st, "replace", vectorstore.Query{Vector: []float32{0, 0, 1}, K: 10})
	if len(got) != 2 {
		t.Fatalf("%d hits after replace, want 2 (x must not be duplicated)", len(got))
	}
	if got[0].ID != "x" || math.Abs(float64(got[0].Score)-1) > s.f.ScoreTolerance {
		t.Errorf("first hit %s %v, want x with score 1 (new vector)", got[0].ID, got[0].Score)
	}
	checkItem(t, got[0].Item, newX)
	for _, filter := range []map[string]string{{"old": "1"}, {"shared": "a"}} {
		if got := s.search(t, st, "replace", vectorstore.Query{Vector: []float32{0, 0, 1}, K: 10, Filter: filter}); len(got) != 0 {
			t.Errorf("filter %v matches the replaced metadata: %+v", filter, got)
		}
	}
	if got := s.search(t, st, "replace", vectorstore.Query{Vector: []float32{1, 0, 0}, K: 1, Filter: map[string]string{"shared": "b"}}); len(got) != 1 || got[0].ID != "x" {
		t.Errorf("new metadata not searchable: %+v", got)
	}
	// Replacing with no metadata and no text clears both.
	bare := vectorstore.Item{ID: "x", Vector: []float32{0, 0, 1}}
	s.upsert(t, st, "replace", []vectorstore.Item{bare})
	checkDump(t, s.dump(t, st, "replace", 3), []vectorstore.Item{bare, {ID: "y", Vector: []float32{0, 1, 0}, Text: "y"}})
}

func (s *suite) duplicateIDInBatch(t *testing.T) {
	st := s.newStore(t)
	last := vectorstore.Item{ID: "d", Vector: []float32{0, 1}, Text: "second"}
	s.upsert(t, st, "dup", []vectorstore.Item{{ID: "d", Vector: []float32{1, 0}, Text: "first"}, last})
	checkDump(t, s.dump(t, st, "dup", 2), []vectorstore.Item{last})
}

func (s *suite) delete(t *testing.T) {
	st := s.newStore(t)
	rng := rand.New(rand.NewPCG(7, 8))
	items := randItems(rng, "del", 20, 6)
	s.upsert(t, st, "del", items)
	c := ctx(t)
	if err := st.Delete(c, "del", []string{"del0003", "del0007", "unknown", "del0003"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	var want []vectorstore.Item
	for _, it := range items {
		if it.ID != "del0003" && it.ID != "del0007" {
			want = append(want, it)
		}
	}
	checkDump(t, s.dump(t, st, "del", 6), want)
	q := items[3].Vector
	got := s.search(t, st, "del", vectorstore.Query{Vector: q, K: 5})
	s.checkRanking(t, got, bruteForce(want, q, 5, nil), want, q)

	for _, ids := range [][]string{nil, {}, {"unknown"}, {"del0003"}} {
		if err := st.Delete(c, "del", ids); err != nil {
			t.Errorf("Delete(%q): %v, want nil", ids, err)
		}
	}
	// A deleted ID can come back.
	s.upsert(t, st, "del", []vectorstore.Item{items[3]})
	checkDump(t, s.dump(t, st, "del", 6), append(want, items[3]))
}

func (s *suite) unknownCollection(t *testing.T) {
	st := s.newStore(t)
	hits, err := st.Search(ctx(t), "nowhere", vectorstore.Query{Vector: []float32{1, 2}, K: 3})
	if err != nil || len(hits) != 0 {
		t.Errorf("Search on unknown collection: %v, %v; want no hits, no error", hits, err)
	}
	if err := st.Delete(ctx(t), "nowhere", []string{"a"}); err != nil {
		t.Errorf("Delete on unknown collection: %v", err)
	}
}

func (s *suite) emptyBatch(t *testing.T) {
	st := s.newStore(t)
	for _, items := range [][]vectorstore.Item{nil, {}} {
		if err := st.Upsert(ctx(t), "empty", items); err != nil {
			t.Errorf("Upsert(%v): %v", items, err)
		}
	}
	// The empty batch fixed no dimension: any first vector is fine.
	s.upsert(t, st, "empty", []vectorstore.Item{{ID: "a", Vector: []float32{1, 2, 3, 4, 5}}})
}

func (s *suite) dimensionMismatch(t *testing.T) {
	st := s.newStore(t)
	c := ctx(t)
	orig := []vectorstore.Item{{ID: "a", Vector: []float32{1, 0, 0, 0}}}
	s.upsert(t, st, "dim", orig)

	err := st.Upsert(c, "dim", []vectorstore.Item{
		{ID: "b", Vector: []float32{0, 1, 0, 0}},
		{ID: "a", Vector: []float32{0, 0, 1, 0}},
		{ID: "c", Vector: []float32{0, 0, 1}},
	})
	if !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("batch with a short vector: %v, want ErrDimension", err)
	}
	checkDump(t, s.dump(t, st, "dim", 4), orig) // nothing of the batch written

	if _, err := st.Search(c, "dim", vectorstore.Query{Vector: []float32{1, 0, 0}, K: 1}); !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("Search with the wrong dimension: %v, want ErrDimension", err)
	}

	// A new collection: a mixed batch fails and creates nothing, so the next
	// batch may choose another dimension.
	err = st.Upsert(c, "fresh", []vectorstore.Item{{ID: "a", Vector: []float32{1, 2}}, {ID: "b", Vector: []float32{1, 2, 3}}})
	if !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("mixed batch on a new collection: %v, want ErrDimension", err)
	}
	s.upsert(t, st, "fresh", []vectorstore.Item{{ID: "a", Vector: []float32{1, 2, 3}}})

	// An emptied collection keeps its dimension.
	if err := st.Delete(c, "dim", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Upsert(c, "dim", []vectorstore.Item{{ID: "z", Vector: []float32{1, 2}}}); !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("upsert into an emptied collection with another dimension: %v, want ErrDimension", err)
	}
	s.upsert(t, st, "dim", []vectorstore.Item{{ID: "z", Vector: []float32{1, 2, 3, 4}}})
}

// poisonItemsParked: vectorstore.UpsertIsolating writes every good item of batches
// that hold items the store refuses, and parks exactly the refused ones, each with
// a refusal error: in a new collection whose first item has an odd dimension, and in
// an existing one.
func (s *suite) poisonItemsParked(t *testing.T) {
	st := s.newStore(t)
	c := ctx(t)
	rng := rand.New(rand.NewPCG(7, 7))
	good := randItems(rng, "good", 40, 8)
	bad := map[string]vectorstore.Item{
		"bad_dim":  {ID: "bad_dim", Vector: []float32{1, 2, 3}},
		"bad_nan":  {ID: "bad_nan", Vector: []float32{1, float32(math.NaN()), 0, 0, 0, 0, 0, 0}},
		"bad_zero": {ID: "bad_zero", Vector: make([]float32, 8)},
	}
	// The odd dimension first: it must not fix the new collection's dimension.
	batch := []vectorstore.Item{bad["bad_dim"]}
	batch = append(batch, good[:20]...)
	batch = append(batch, bad["bad_nan"])
	batch = append(batch, good[20:]...)
	batch = append(batch, bad["bad_zero"])
	for _, coll := range []string{"poison_new", "poison_old"} {
		if coll == "poison_old" {
			s.upsert(t, st, coll, good[:1])
		}
		parked, err := vectorstore.UpsertIsolating(c, st, coll, batch, 16)
		if err != nil {
			t.Fatalf("%s: UpsertIsolating: %v", coll, err)
		}
		got := map[string]bool{}
		for _, p := range parked {
			got[p.Item.ID] = true
			if _, ok := bad[p.Item.ID]; !ok || !vectorstore.Refused(p.Err) {
				t.Errorf("%s: parked %q: %v; want only the bad items, with a refusal", coll, p.Item.ID, p.Err)
			}
		}
		if len(got) != len(bad) || len(parked) != len(bad) {
			t.Errorf("%s: parked %v, want each of %v once", coll, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(bad)))
		}
		checkDump(t, s.dump(t, st, coll, 8), good)
	}
}

func (s *suite) invalidInput(t *testing.T) {
	st := s.newStore(t)
	c := ctx(t)
	good := vectorstore.Item{ID: "good", Vector: []float32{1, 2, 3}}
	s.upsert(t, st, "inv", []vectorstore.Item{good})

	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for name, bad := range map[string]vectorstore.Item{
		"empty ID":     {ID: "", Vector: []float32{1, 2, 3}},
		"nil vector":   {ID: "n"},
		"empty vector": {ID: "n", Vector: []float32{}},
		"NaN":          {ID: "n", Vector: []float32{1, nan, 3}},
		"+Inf":         {ID: "n", Vector: []float32{1, inf, 3}},
		"-Inf":         {ID: "n", Vector: []float32{1, -inf, 3}},
		"zero vector":  {ID: "n", Vector: []float32{0, 0, 0}},
	} {
		batch := []vectorstore.Item{{ID: "other", Vector: []float32{3, 2, 1}}, bad}
		if err := st.Upsert(c, "inv", batch); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("Upsert with %s: %v, want ErrInvalid", name, err)
		}
	}
	checkDump(t, s.dump(t, st, "inv", 3), []vectorstore.Item{good})

	for _, coll := range []string{"", "has space", "9lives", "dash-ed", "dot.ted", "ünïcode", strings.Repeat("a", 256)} {
		if err := st.Upsert(c, coll, []vectorstore.Item{good}); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("Upsert into collection %q: %v, want ErrInvalid", coll, err)
		}
		if _, err := st.Search(c, coll, vectorstore.Query{Vector: []float32{1, 2, 3}, K: 1}); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("Search in collection %q: %v, want ErrInvalid", coll, err)
		}
		if err := st.Delete(c, coll, []string{"good"}); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("Delete in collection %q: %v, want ErrInvalid", coll, err)
		}
	}
	for _, coll := range []string{"_under", "Mixed_Case_09", strings.Repeat("a", 255)} {
		s.upsert(t, st, coll, []vectorstore.Item{good})
	}

	for name, q := range map[string]vectorstore.Query{
		"K=0":          {Vector: []float32{1, 2, 3}, K: 0},
		"K<0":          {Vector: []float32{1, 2, 3}, K: -1},
		"nil vector":   {K: 1},
		"NaN":          {Vector: []float32{nan, 2, 3}, K: 1},
		"Inf":          {Vector: []float32{inf, 2, 3}, K: 1},
		"zero vector":  {Vector: []float32{0, 0, 0}, K: 1},
		"unknown coll": {Vector: []float32{0, 0, 0}, K: 1}, // checked before the lookup
	} {
		coll := "inv"
		if name == "unknown coll" {
			coll = "nowhere"
		}
		if _, err := st.Search(c, coll, q); !errors.Is(err, vectorstore.ErrInvalid) {
			t.Errorf("Search with %s: %v, want ErrInvalid", name, err)
		}
	}
	if err := st.Delete(c, "inv", []string{"good", ""}); !errors.Is(err, vectorstore.ErrInvalid) {
		t.Errorf("Delete with an empty ID: %v, want ErrInvalid", err)
	}
	checkDump(t, s.dump(t, st, "inv", 3), []vectorstore.Item{good})
}

func (s *suite) collectionsIsolated(t *testing.T) {
	st := s.newStore(t)
	a := []vectorstore.Item{{ID: "same", Vector: []float32{1, 0}, Metadata: map[string]string{"in": "a"}, Text: "a"}}
	b := []vectorstore.Item{
		{ID: "same", Vector: []float32{0, 1, 0}, Metadata: map[string]string{"in": "b"}, Text: "b"},
		{ID: "only_b", Vector: []float32{0, 0, 1}},
	}
	s.upsert(t, st, "coll_a", a)
	s.upsert(t, st, "coll_b", b)
	checkDump(t, s.dump(t, st, "coll_a", 2), a)
	checkDump(t, s.dump(t, st, "coll_b", 3), b)
	if err := st.Delete(ctx(t), "coll_a", []string{"same", "only_b"}); err != nil {
		t.Fatal(err)
	}
	checkDump(t, s.dump(t, st, "coll_a", 2), nil)
	checkDump(t, s.dump(t, st, "coll_b", 3), b)
}

func (s *suite) callerMemory(t *testing.T) {
	st := s.newStore(t)
	in := vectorstore.Item{ID: "m", Vector: []float32{1, 2, 3}, Metadata: map[string]string{"k": "v"}, Text: "t"}
	want := vectorstore.Item{ID: "m", Vector: []float32{1, 2, 3}, Metadata: map[string]string{"k": "v"}, Text: "t"}
	batch := []vectorstore.Item{in}
	s.upsert(t, st, "mem", batch)
	in.Vector[0] = 100
	in.Metadata["k"] = "changed"
	batch[0].ID = "changed"
	hits := s.search(t, st, "mem", vectorstore.Query{Vector: []float32{1, 2, 3}, K: 1})
	if len(hits) != 1 {
		t.Fatalf("%d hits", len(hits))
	}
	checkItem(t, hits[0].Item, want)
	hits[0].Vector[1] = 100
	hits[0].Metadata["k"] = "changed"
	checkDump(t, s.dump(t, st, "mem", 3), []vectorstore.Item{want})
}

func (s *suite) concurrent(t *testing.T) {
	st := s.newStore(t)
	c := ctx(t)
	const writers, perWriter, dim = 4, 40, 8
	s.upsert(t, st, "conc", []vectorstore.Item{{ID: "seed", Vector: unitVec(dim, 0)}})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for i := range perWriter {
				id := fmt.Sprintf("w%d_%03d", w, i)
				err := st.Upsert(c, "conc", []vectorstore.Item{{ID: id, Vector: randVec(rng, dim), Metadata: map[string]string{"w": fmt.Sprint(w)}}})
				if err == nil && i%4 == 3 { // delete every fourth item again
					err = st.Delete(c, "conc", []string{id})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	for r := range 3 {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for {
				select {
				case <-done:
					return
				default:
				}
				hits, err := st.Search(c, "conc", vectorstore.Query{Vector: randVec(rng, dim), K: 5, Filter: map[string]string{"w": fmt.Sprint(r)}})
				if err != nil {
					errs <- err
					return
				}
				for _, h := range hits {
					if h.Metadata["w"] != fmt.Sprint(r) {
						errs <- fmt.Errorf("hit %s does not match the filter", h.ID)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := len(s.dump(t, st, "conc", dim)), 1+writers*perWriter*3/4; got != want {
		t.Errorf("%d items after concurrent writes, want %d", got, want)
	}
}

func (s *suite) contextCancelled(t *testing.T) {
	st := s.newStore(t)
	item := vectorstore.Item{ID: "keep", Vector: []float32{1, 1}}
	s.upsert(t, st, "ctx", []vectorstore.Item{item})
	c, cancel := context.WithCancel(t.Context())
	cancel()
	if err := st.Upsert(c, "ctx", []vectorstore.Item{{ID: "new", Vector: []float32{1, 0}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Upsert with a cancelled ctx: %v, want context.Canceled", err)
	}
	if _, err := st.Search(c, "ctx", vectorstore.Query{Vector: []float32{1, 0}, K: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Search with a cancelled ctx: %v, want context.Canceled", err)
	}
	if err := st.Delete(c, "ctx", []string{"keep"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled ctx: %v, want context.Canceled", err)
	}
	checkDump(t, s.dump(t, st, "ctx", 2), []vectorstore.Item{item})
}

func (s *suite) close(t *testing.T) {
	st := s.newStore(t)
	closer, ok := st.(io.Closer)
	if !ok {
		t.Skip("store has no Close")
	}
	s.upsert(t, st, "cl", []vectorstore.Item{{ID: "a", Vector: []float32{1}}})
	for i := range 2 {
		if err := closer.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	c := ctx(t)
	if err := st.Upsert(c, "cl", []vectorstore.Item{{ID: "b", Vector: []float32{1}}}); !errors.Is(err, vectorstore.ErrClosed) {
		t.Errorf("Upsert after Close: %v, want ErrClosed", err)
	}
	if _, err := st.Search(c, "cl", vectorstore.Query{Vector: []float32{1}, K: 1}); !errors.Is(err, vectorstore.ErrClosed) {
		t.Errorf("Search after Close: %v, want ErrClosed", err)
	}
	if err := st.Delete(c, "cl", []string{"a"}); !errors.Is(err, vectorstore.ErrClosed) {
		t.Errorf("Delete after Close: %v, want ErrClosed", err)
	}
}

func (s *suite) persistence(t *testing.T) {
	if s.f.Reopen == nil {
		t.Skip("store does not persist (Features.Reopen is nil)")
	}
	st := s.newStore(t)
	c := ctx(t)
	rng := rand.New(rand.NewPCG(11, 12))
	a := randItems(rng, "a", 60, 12)
	b := randItems(rng, "b", 10, 5)
	s.upsert(t, st, "pa", a[:30])
	s.upsert(t, st, "pa", a[30:])
	s.upsert(t, st, "pb", b)
	a[5] = vectorstore.Item{ID: a[5].ID, Vector: randVec(rng, 12), Metadata: map[string]string{"v": "2"}, Text: "replaced"}
	s.upsert(t, st, "pa", []vectorstore.Item{a[5]})
	if err := st.Delete(c, "pa", []string{a[0].ID, a[59].ID}); err != nil {
		t.Fatal(err)
	}
	a = a[1:59]
	var bIDs []string
	for _, it := range b {
		bIDs = append(bIDs, it.ID)
	}
	if err := st.Delete(c, "pb", bIDs); err != nil { // pb is now empty but exists
		t.Fatal(err)
	}
	q := randVec(rng, 12)
	before := s.search(t, st, "pa", vectorstore.Query{Vector: q, K: 7, Filter: map[string]string{"parity": "odd"}})

	st = s.f.Reopen(t, st)
	checkDump(t, s.dump(t, st, "pa", 12), a)
	checkDump(t, s.dump(t, st, "pb", 5), nil)
	after := s.search(t, st, "pa", vectorstore.Query{Vector: q, K: 7, Filter: map[string]string{"parity": "odd"}})
	if !slices.EqualFunc(before, after, func(x, y vectorstore.Hit) bool { return x.ID == y.ID && x.Score == y.Score }) {
		t.Errorf("search differs after reopen:\n before %v\n after  %v", ids(before), ids(after))
	}
	if err := st.Upsert(c, "pb", []vectorstore.Item{{ID: "x", Vector: []float32{1, 2}}}); !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("emptied collection lost its dimension on reopen: %v, want ErrDimension", err)
	}

	// Writes after a reopen persist too.
	extra := vectorstore.Item{ID: "after_reopen", Vector: randVec(rng, 5), Text: "x"}
	s.upsert(t, st, "pb", []vectorstore.Item{extra})
	if err := st.Delete(c, "pa", []string{a[0].ID}); err != nil {
		t.Fatal(err)
	}
	st = s.f.Reopen(t, st)
	checkDump(t, s.dump(t, st, "pa", 12), a[1:])
	checkDump(t, s.dump(t, st, "pb", 5), []vectorstore.Item{extra})
}

func (s *suite) persistenceAfterFailures(t *testing.T) {
	if s.f.Reopen == nil {
		t.Skip("store does not persist (Features.Reopen is nil)")
	}
	st := s.newStore(t)
	c := ctx(t)
	good := vectorstore.Item{ID: "good", Vector: []float32{1, 2, 3}}
	s.upsert(t, st, "pf", []vectorstore.Item{good})
	_ = st.Upsert(c, "pf", []vectorstore.Item{{ID: "bad1", Vector: []float32{1, 2}}})
	_ = st.Upsert(c, "pf", []vectorstore.Item{{ID: "bad2", Vector: []float32{1, 2, 3}}, {ID: ""}})
	_ = st.Upsert(c, "pf_new", []vectorstore.Item{{ID: "bad3", Vector: []float32{0}}})
	_ = st.Delete(c, "pf", []string{"good", ""})
	st = s.f.Reopen(t, st)
	checkDump(t, s.dump(t, st, "pf", 3), []vectorstore.Item{good})
	// The failed upsert created no collection: any dimension is still free.
	s.upsert(t, st, "pf_new", []vectorstore.Item{{ID: "ok", Vector: []float32{1, 2, 3, 4}}})
}

func ids(hits []vectorstore.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// Clustered returns n vectors of dimension dim drawn around the given number of
// cluster centres, with the cluster of each. A centre is a random unit vector; a
// point is its centre plus gaussian noise of norm about spread.
//
// With decay 0 the noise is isotropic: within a cluster the points fill all dim
// dimensions, the hardest case for an approximate index (no structure to follow).
// With decay d > 0 the noise has a decaying spectrum, as text embeddings do: the
// variance along the cluster's j-th principal axis (j = 1, 2, ...; the axes are a
// random permutation of the coordinates, different per cluster) is proportional to
// j^-d. decay 1 gives an effective dimension (participation ratio) of about 26 at
// dim 384. Benchmarks and recall tests use this so their numbers mean something for
// real collections; they should say which decay they used.
func Clustered(rng *rand.Rand, n, dim, clusters int, spread, decay float64) (vecs [][]float32, cluster []int) {
	centres := make([][]float64, clusters)
	scales := make([][]float64, clusters) // per coordinate: the noise's standard deviation
	var total float64
	for j := range dim {
		total += math.Pow(float64(j+1), -decay)
	}
	for i := range centres {
		c := make([]float64, dim)
		var norm float64
		for j := range c {
			c[j] = rng.NormFloat64()
			norm += c[j] * c[j]
		}
		norm = math.Sqrt(norm)
		for j := range c {
			c[j] /= norm
		}
		centres[i] = c
		sc := make([]float64, dim)
		for j, axis := range rng.Perm(dim) {
			sc[axis] = spread * math.Sqrt(math.Pow(float64(j+1), -decay)/total)
		}
		scales[i] = sc
	}
	vecs = make([][]float32, n)
	cluster = make([]int, n)
	for i := range vecs {
		k := rng.IntN(clusters)
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(centres[k][j] + scales[k][j]*rng.NormFloat64())
		}
		vecs[i], cluster[i] = v, k
	}
	return vecs, cluster
}

// StartHelperProcess runs the test binary's test named test (a helper process)
// with env set to value, and returns once the process prints "helper: ready"
// (it holds what it was started to hold); it is killed when t ends.
func StartHelperProcess(t *testing.T, test, env, value string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+value)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var out []string
		for sc.Scan() {
			if sc.Text() == "helper: ready" {
				ready <- ""
				return
			}
			out = append(out, sc.Text())
		}
		ready <- "helper exited before it was ready: " + strings.Join(out, "\n")
	}()
	select {
	case msg := <-ready:
		if msg != "" {
			t.Fatal(msg)
		}
	case <-time.After(time.Minute):
		t.Fatal("the helper process was not ready in time")
	}
	return cmd
}
