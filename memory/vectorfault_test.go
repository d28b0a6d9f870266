package memory_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// errStoreDown is what faultyStore answers while it is down, as a vector store that
// does not answer does.
var errStoreDown = errors.New("vector store unavailable (test)")

// faultyStore is a vector store that can be taken down, and counts the requests
// made through it by operation and collection.
type faultyStore struct {
	vectorstore.Store
	down  atomic.Bool
	mu    sync.Mutex
	calls map[string]int // "search mem_semantic_text" -> count
}

func newFaultyStore(inner vectorstore.Store) *faultyStore {
	return &faultyStore{Store: inner, calls: map[string]int{}}
}

func (s *faultyStore) count(op, coll string) error {
	s.mu.Lock()
	s.calls[op+" "+coll]++
	s.mu.Unlock()
	if s.down.Load() {
		return errStoreDown
	}
	return nil
}

func (s *faultyStore) callsTo(op, coll string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op+" "+coll]
}

func (s *faultyStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	if err := s.count("upsert", coll); err != nil {
		return err
	}
	return s.Store.Upsert(ctx, coll, items)
}

func (s *faultyStore) Delete(ctx context.Context, coll string, ids []string) error {
	if err := s.count("delete", coll); err != nil {
		return err
	}
	return s.Store.Delete(ctx, coll, ids)
}

func (s *faultyStore) Search(ctx context.Context, coll string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if err := s.count("search", coll); err != nil {
		return nil, err
	}
	return s.Store.Search(ctx, coll, q)
}

func resultIDs(rs []memory.Result) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.Memory.ID
	}
	return ids
}

// While the vector store is down, memories are written all the same (to the log,
// answered as stored) and searches by keyword answer from the log, in a namespace
// open before the outage and in one first opened during it (a restart); a hybrid
// search answers without the store and says so; a search by vector fails with
// ErrVectorStore. Once the store is back, a search by vector finds what was written
// during the outage: its vectors were put in the store from the events.
func TestWritesAndKeywordSearchWhileVectorStoreIsDown(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	inner := openStore(t, "")
	store := newFaultyStore(inner)
	var tmu sync.Mutex
	var troubles []string // "namespace collection failed|recovered"
	hear := func(ns, coll string, err error) {
		tmu.Lock()
		defer tmu.Unlock()
		what := "recovered"
		if err != nil {
			what = "failed"
		}
		troubles = append(troubles, ns+" "+coll+" "+what)
	}
	open := func() *memory.Memories {
		m, err := memory.Open(memory.Config{Log: openLog(t, dir, true), Vectors: store, Now: (&clock{now: t0}).Now, NewID: sequentialIDs(),
			VectorTrouble: hear})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open()
	ns, err := m.Namespace(ctx, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	before := add(t, ns, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes green tea"})

	store.down.Store(true)
	var during []string
	for i, c := range []string{"Alice paid the hotel in Oslo on Monday", "Bob booked the train to Bergen"} {
		res, err := ns.Add(ctx, "k-during-"+string(rune('a'+i)), []memory.AddRequest{{Tier: memory.Episodic, Content: c}})
		if err != nil {
			t.Fatalf("write %d while the vector store is down: %v; want it stored in the log", i+1, err)
		}
		during = append(during, res[0].ID)
	}
	res, err := ns.Search(ctx, memory.Query{Text: "hotel Oslo", Mode: memory.ModeKeyword})
	if err != nil || !slices.Contains(resultIDs(res), during[0]) {
		t.Fatalf("keyword search while the vector store is down: %v %v; want %s", resultIDs(res), err, during[0])
	}
	res, note, err := ns.SearchNoted(ctx, memory.Query{Text: "train to Bergen"})
	if err != nil || !slices.Contains(resultIDs(res), during[1]) || !strings.Contains(note, "mem_episodic_text") || !strings.Contains(note, errStoreDown.Error()) {
		t.Fatalf("hybrid search while the vector store is down: %v %q %v; want %s and a note naming the collection and the cause", resultIDs(res), note, err, during[1])
	}
	if _, err := ns.Search(ctx, memory.Query{Text: "train to Bergen", Mode: memory.ModeVector}); !errors.Is(err, memory.ErrVectorStore) || !strings.Contains(err.Error(), errStoreDown.Error()) {
		t.Fatalf("vector search while the vector store is down: %v; want ErrVectorStore with the cause", err)
	}

	// A restart during the outage: the namespace opens from the log.
	m2 := open()
	ns2, err := m2.Namespace(ctx, "user:alice")
	if err != nil {
		t.Fatalf("opening a namespace while the vector store is down: %v", err)
	}
	res, err = ns2.Search(ctx, memory.Query{Text: "Alice", Mode: memory.ModeKeyword, Limit: 10})
	if err != nil || !slices.Contains(resultIDs(res), before[0].ID) || !slices.Contains(resultIDs(res), during[0]) {
		t.Fatalf("keyword search after a restart during the outage: %v %v", resultIDs(res), err)
	}
	more, err := ns2.Add(ctx, "k-restarted", []memory.AddRequest{{Tier: memory.Semantic, Content: "Carol likes oolong"}})
	if err != nil {
		t.Fatalf("write after a restart during the outage: %v", err)
	}

	store.down.Store(false)
	for q, want := range map[string]string{"Alice paid the hotel in Oslo on Monday": during[0], "Bob booked the train to Bergen": during[1],
		"Carol likes oolong": more[0].ID, "Alice likes green tea": before[0].ID} {
		res, err := ns2.Search(ctx, memory.Query{Text: q, Mode: memory.ModeVector, Limit: 1})
		if err != nil || !slices.Equal(resultIDs(res), []string{want}) {
			t.Errorf("vector search %q once the store is back: %v %v, want [%s]", q, resultIDs(res), err, want)
		}
	}
	tmu.Lock()
	if !slices.Contains(troubles, "user:alice mem_episodic_text failed") || !slices.Contains(troubles, "user:alice mem_episodic_text recovered") {
		t.Errorf("Config.VectorTrouble heard %q; want the episodic collection's failure and recovery", troubles)
	}
	tmu.Unlock()
	if n := len(ns2.Snapshot()); n != 4 {
		t.Errorf("%d memories in the namespace, want 4 (each written once)", n)
	}
	// The store holds each memory's vector once, in its tier's collection.
	for coll, want := range map[string]int{"mem_semantic_text": 2, "mem_episodic_text": 2} {
		q, _ := llm.HashingEmbedder{}.Embed(ctx, []string{"Alice"})
		hits, err := inner.Search(ctx, coll, vectorstore.Query{Vector: q[0], K: 100, Filter: map[string]string{"ns": "user:alice"}})
		if err != nil || len(hits) != want {
			t.Errorf("%s holds %d vectors of the namespace (%v), want %d", coll, len(hits), err, want)
		}
	}
}

// A vector store that refuses a namespace's vectors in one collection (one of
// another dimension: another deployment's collection, or another embedder's) does
// not block the namespace: writes are stored in the log, searches by keyword and
// by vector in the other collections answer, a search by vector in that collection
// fails with an error that names the cause, and a hybrid search answers and says
// what it did without.
func TestRefusedVectorsDoNotBlockNamespace(t *testing.T) {
	ctx := testCtx(t)
	inner := openStore(t, "")
	// Another deployment's collection of the same name, of dimension 8.
	if err := inner.Upsert(ctx, "mem_semantic_text", []vectorstore.Item{{ID: "other/x", Vector: []float32{1, 0, 0, 0, 0, 0, 0, 0}}}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *memory.Config) { c.Vectors = inner })
	ns := f.ns(t, "user:bob")
	sem, err := ns.Add(ctx, "k1", []memory.AddRequest{{Tier: memory.Semantic, Content: "Bob likes black coffee"}})
	if err != nil {
		t.Fatalf("write whose vector the store refuses: %v; want it stored in the log", err)
	}
	epi, err := ns.Add(ctx, "k2", []memory.AddRequest{{Tier: memory.Episodic, Content: "Bob flew to Lisbon on Tuesday"}})
	if err != nil {
		t.Fatalf("a later write of the namespace: %v", err)
	}
	res, err := ns.Search(ctx, memory.Query{Text: "Bob flew to Lisbon on Tuesday", Mode: memory.ModeVector, Tiers: []memory.Tier{memory.Episodic}, Limit: 1})
	if err != nil || !slices.Equal(resultIDs(res), []string{epi[0].ID}) {
		t.Errorf("vector search of the episodic tier: %v %v, want [%s]", resultIDs(res), err, epi[0].ID)
	}
	res, err = ns.Search(ctx, memory.Query{Text: "black coffee", Mode: memory.ModeKeyword, Tiers: []memory.Tier{memory.Semantic}})
	if err != nil || !slices.Equal(resultIDs(res), []string{sem[0].ID}) {
		t.Errorf("keyword search of the semantic tier: %v %v, want [%s]", resultIDs(res), err, sem[0].ID)
	}
	_, err = ns.Search(ctx, memory.Query{Text: "black coffee", Mode: memory.ModeVector, Tiers: []memory.Tier{memory.Semantic}})
	if !errors.Is(err, memory.ErrVectorStore) || !errors.Is(err, vectorstore.ErrDimension) || !strings.Contains(err.Error(), "mem_semantic_text") {
		t.Errorf("vector search of the semantic tier: %v; want ErrVectorStore naming the collection and ErrDimension", err)
	}
	res, note, err := ns.SearchNoted(ctx, memory.Query{Text: "Bob coffee Lisbon"})
	if err != nil || len(res) != 2 || !strings.Contains(note, "mem_semantic_text") || !strings.Contains(note, "dimension") {
		t.Errorf("hybrid search: %v %q %v; want both memories and a note naming the collection and the cause", resultIDs(res), note, err)
	}
	if n := len(events(t, f.log, "user:bob")); n != 2 {
		t.Errorf("%d events, want 2", n)
	}
}

// A search asks the vector store only about the collections that hold vectors of
// the namespace: a namespace of text memories costs no request on the image and
// audio collections, nor on the collections of its empty tiers.
func TestSearchAsksOnlyCollectionsHoldingVectors(t *testing.T) {
	ctx := testCtx(t)
	store := newFaultyStore(openStore(t, ""))
	f := newFixture(t, func(c *memory.Config) { c.Vectors = store })
	ns := f.ns(t, "user:carol")
	add(t, ns, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "Carol likes oolong"})
	for range 3 {
		res, err := ns.Search(ctx, memory.Query{Text: "Carol oolong"})
		if err != nil || len(res) != 1 {
			t.Fatalf("search: %v %v", resultIDs(res), err)
		}
	}
	if n := store.callsTo("search", "mem_semantic_text"); n != 3 {
		t.Errorf("%d searches of mem_semantic_text, want 3", n)
	}
	for _, c := range []string{"mem_perceptual_image", "mem_perceptual_audio", "mem_perceptual_text", "mem_working_text", "mem_episodic_text"} {
		if n := store.callsTo("search", c); n != 0 {
			t.Errorf("%d searches of %s, which holds no vector of the namespace; want none", n, c)
		}
	}
}
