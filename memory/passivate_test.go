package memory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// upsertCountingStore counts the vectors upserted through it.
type upsertCountingStore struct {
	vectorstore.Store
	items atomic.Int64
}

func (s *upsertCountingStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	s.items.Add(int64(len(items)))
	return s.Store.Upsert(ctx, coll, items)
}

// A node that touches many namespaces keeps at most MaxNamespaces of them in
// memory: the least recently used are released, and folded again from their events
// on their next use, with every memory there and found by vector, and without
// writing their vectors to the store again.
func TestNamespacesPastTheBoundAreReleasedAndLoadAgain(t *testing.T) {
	store := &upsertCountingStore{}
	f := newFixture(t, func(c *memory.Config) {
		store.Store = c.Vectors
		c.Vectors, c.MaxNamespaces, c.IdleTimeout = store, 5, -1
	})
	ctx := testCtx(t)
	const spaces = 40
	for i := range spaces {
		ns := f.ns(t, fmt.Sprintf("user:u%02d", i))
		add(t, ns, "", memory.AddRequest{Tier: memory.Semantic, Content: fmt.Sprintf("user %d lives in town %d", i, i)},
			memory.AddRequest{Tier: memory.Episodic, Content: fmt.Sprintf("user %d went hiking on day %d", i, i)},
			memory.AddRequest{Tier: memory.Working, Content: fmt.Sprintf("user %d is reading book %d", i, i)})
		if n := f.mem.LoadedNamespaces(); n > 5 {
			t.Fatalf("after %d namespaces: %d loaded; want at most MaxNamespaces, 5", i+1, n)
		}
	}
	upserted := store.items.Load()
	if upserted != 3*spaces {
		t.Fatalf("%d vectors upserted; want %d", upserted, 3*spaces)
	}
	for i := range spaces {
		ns := f.ns(t, fmt.Sprintf("user:u%02d", i))
		if got := len(ns.Snapshot()); got != 3 {
			t.Fatalf("user:u%02d loaded again: %d memories; want 3", i, got)
		}
		res, err := ns.Search(ctx, memory.Query{Text: fmt.Sprintf("hiking on day %d", i), Mode: "vector", Limit: 1})
		if err != nil || len(res) != 1 || res[0].Memory.Tier != memory.Episodic {
			t.Fatalf("user:u%02d loaded again, a search by vector: %+v, %v", i, res, err)
		}
	}
	if n := f.mem.LoadedNamespaces(); n > 5 {
		t.Fatalf("%d loaded; want at most 5", n)
	}
	if got := store.items.Load() - upserted; got != 0 {
		t.Fatalf("loading the released namespaces again upserted %d vectors; want none (the store holds them)", got)
	}
}

// A namespace unused for IdleTimeout is released; one held by a long operation (a
// consolidation run) is not, until it lets go; nothing written is lost.
func TestIdleNamespacesAreReleasedUnlessHeld(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.IdleTimeout = time.Minute })
	ctx := testCtx(t)
	a, b := f.ns(t, "user:a"), f.ns(t, "user:b")
	add(t, a, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "A likes jazz"})
	add(t, b, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "B likes rock"})
	held, release, err := f.mem.Hold(ctx, "user:b")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(30 * time.Second)
	if n := f.mem.ReleaseIdle(); n != 0 || f.mem.LoadedNamespaces() != 2 {
		t.Fatalf("before the idle timeout: released %d, %d loaded; want 0 and 2", n, f.mem.LoadedNamespaces())
	}
	f.clock.Add(31 * time.Second)
	if n := f.mem.ReleaseIdle(); n != 1 || f.mem.LoadedNamespaces() != 1 {
		t.Fatalf("past the idle timeout, user:b held: released %d, %d loaded; want 1 and 1", n, f.mem.LoadedNamespaces())
	}
	// The holder goes on: its writes are stored.
	add(t, held, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "B plays the drums"})
	release()
	release()
	f.clock.Add(2 * time.Minute)
	if n := f.mem.ReleaseIdle(); n != 1 || f.mem.LoadedNamespaces() != 0 {
		t.Fatalf("released by its holder and idle: released %d, %d loaded; want 1 and 0", n, f.mem.LoadedNamespaces())
	}
	for name, want := range map[string]int{"user:a": 1, "user:b": 2} {
		if got := len(f.ns(t, name).Snapshot()); got != want {
			t.Fatalf("%s loaded again: %d memories; want %d", name, got, want)
		}
	}
	// A write repeated under its key after the release writes nothing twice.
	if res := add(t, f.ns(t, "user:a"), "k1", memory.AddRequest{Tier: memory.Semantic, Content: "A likes jazz"}); len(f.ns(t, "user:a").Snapshot()) != 1 || res[0].ID == "" {
		t.Fatalf("a write repeated after the release: %+v, %d memories", res, len(f.ns(t, "user:a").Snapshot()))
	}
}

// Namespaces opened, written and released at once lose nothing: every write of
// many goroutines over more namespaces than the bound is there after.
func TestReleaseUnderConcurrentWrites(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout = 2, -1 })
	ctx := testCtx(t)
	const workers, writes, spaces = 8, 30, 6
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range writes {
				name := fmt.Sprintf("user:c%d", (w+i)%spaces)
				ns, err := f.mem.Namespace(ctx, name)
				if err == nil {
					_, err = ns.Add(ctx, fmt.Sprintf("w%d-%d", w, i), []memory.AddRequest{{Tier: memory.Semantic, Content: fmt.Sprintf("worker %d wrote note %d", w, i)}})
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i := range spaces {
		total += len(f.ns(t, fmt.Sprintf("user:c%d", i)).Snapshot())
	}
	if total != workers*writes {
		t.Fatalf("%d memories; want %d", total, workers*writes)
	}
}

// A caller that got a namespace before it was released writes through it: the
// namespace loaded in its place shows the write at its next use.
func TestAWriteThroughAReleasedNamespaceIsSeen(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout = 1, -1 })
	old := f.ns(t, "user:x")
	add(t, old, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "X likes tea"})
	f.ns(t, "user:y") // releases user:x
	loaded := f.ns(t, "user:x")
	if loaded == old {
		t.Fatal("user:x was not released past the bound")
	}
	add(t, old, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "X likes cake"})
	if got := len(f.ns(t, "user:x").Snapshot()); got != 2 {
		t.Fatalf("user:x after a write through its released instance: %d memories; want 2", got)
	}
}

// A write through a released instance while the vector store is down leaves no
// count behind: once the store is back and the loaded instance wrote the vectors,
// the backlog is 0 (the released one used to add its share to the totals, where
// nothing took it off again, and every catch-up tick refreshed every namespace).
func TestAWriteThroughAReleasedNamespaceLeavesNoBacklog(t *testing.T) {
	store := newFaultyStore(openStore(t, ""))
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout, c.Vectors = 1, -1, store })
	old := f.ns(t, "user:x")
	add(t, old, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "X likes tea"})
	f.ns(t, "user:y") // releases user:x
	if loaded := f.ns(t, "user:x"); loaded == old {
		t.Fatal("user:x was not released past the bound")
	}
	store.down.Store(true)
	add(t, old, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "X likes cake"})
	store.down.Store(false)
	ctx := context.Background()
	for range 3 {
		if err := f.mem.CatchUpVectors(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.mem.VectorBacklog(); n != 0 {
		t.Errorf("vector backlog %d after the store came back; want 0", n)
	}
}

// The namespace an open returns is not released by that open's sweep, even when
// every other loaded namespace is held past the bound: the caller would work on a
// released instance, folded again at the next use.
func TestTheNamespaceOpenedIsNotReleasedByItsOwnOpen(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout = 2, -1 })
	ctx := testCtx(t)
	for _, name := range []string{"user:a", "user:b"} {
		_, release, err := f.mem.Hold(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	c := f.ns(t, "user:c")
	if n := f.mem.LoadedNamespaces(); n != 3 {
		t.Fatalf("%d namespaces loaded after opening user:c past the bound, the others held; want 3", n)
	}
	if again := f.ns(t, "user:c"); again != c {
		t.Fatal("user:c was released by its own open: a second open returned another instance")
	}
}

// Past the bound, with many namespaces that cannot be released (the vector store,
// down, lacks their vectors), an open does not try each of them again: its
// sweep's work does not grow with them.
func TestOpensPastTheBoundDoNotRescanUnreleasableNamespaces(t *testing.T) {
	store := newFaultyStore(openStore(t, ""))
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout, c.Vectors = 3, -1, store })
	store.down.Store(true)
	const stuck = 40
	for i := range stuck {
		name := fmt.Sprintf("user:s%02d", i)
		add(t, f.ns(t, name), "", memory.AddRequest{Tier: memory.Semantic, Content: fmt.Sprintf("user %d likes tea", i)})
		f.ns(t, name)
	}
	if n := f.mem.LoadedNamespaces(); n != stuck {
		t.Fatalf("%d loaded; want the %d whose vectors the store lacks", n, stuck)
	}
	before := memory.SweepExamined(f.mem)
	const opens = 2 * stuck
	for i := range stuck {
		f.ns(t, fmt.Sprintf("user:s%02d", (i*7)%stuck)) // one of them, used again
		f.ns(t, fmt.Sprintf("user:n%02d", i))           // a new one
	}
	if work := memory.SweepExamined(f.mem) - before; work > 3*opens {
		t.Fatalf("%d opens past the bound with %d namespaces unreleasable tried %d releases; want at most %d (not all of them at each open)", opens, stuck, work, 3*opens)
	}
	if n := f.mem.LoadedNamespaces(); n != stuck+1 {
		t.Fatalf("%d loaded; want the %d unreleasable and the last one opened", n, stuck)
	}
}

// A namespace a sweep past the bound could not release is looked at again by the
// next full sweep (entity.SweepEvery later), which brings the loaded namespaces back
// within the bound once the holds end.
func TestUnreleasableNamespacesAreLookedAtAgainByTheNextFullSweep(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.MaxNamespaces, c.IdleTimeout = 2, -1 })
	ctx := testCtx(t)
	var releases []func()
	for _, name := range []string{"user:a", "user:b", "user:c"} {
		_, release, err := f.mem.Hold(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	f.ns(t, "user:d")
	for _, release := range releases {
		release()
	}
	f.ns(t, "user:e") // releases user:d; the others, found held, wait for a full sweep
	if n := f.mem.LoadedNamespaces(); n != 4 {
		t.Fatalf("%d loaded; want 4 (user:a, b, c, e)", n)
	}
	f.clock.Add(11 * time.Second)
	e := f.ns(t, "user:e")
	if n := f.mem.LoadedNamespaces(); n != 2 {
		t.Fatalf("%d loaded after a full sweep; want MaxNamespaces, 2", n)
	}
	if f.ns(t, "user:e") != e {
		t.Fatal("user:e released by the full sweep of its own open")
	}
}
