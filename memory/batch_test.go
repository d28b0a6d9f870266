package memory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// gateLog counts its Appends, holds the first one after heldBatch armed it until
// heldBatch opens it (the writes called meanwhile queue behind it), and fails the
// Append numbered fail (counted since armed, 1-based; 0: none), storing nothing
// of it.
type gateLog struct {
	eventlog.Log
	appends atomic.Int64
	armed   atomic.Bool
	fail    int64
	held    chan struct{} // closed when the held Append waits
	open    chan struct{}
}

func newGateLog(t *testing.T, fail int64) *gateLog {
	return &gateLog{Log: openLog(t, t.TempDir(), false), fail: fail, held: make(chan struct{}), open: make(chan struct{})}
}

func (l *gateLog) Append(ctx context.Context, events []messages.Envelope) error {
	n := l.appends.Add(1)
	if l.armed.CompareAndSwap(true, false) {
		close(l.held)
		<-l.open
	}
	if n == l.fail {
		return errors.New("the log lost its connection")
	}
	return l.Log.Append(ctx, events)
}

// heldBatch runs first, waits until its Append is held, runs the others at once,
// waits until they all queued behind it, then lets the Append go and waits for
// every write. The others thus make one batch (at most memory.BatchMax).
func heldBatch(t *testing.T, l *gateLog, ns *memory.Namespace, first func(), others ...func()) {
	t.Helper()
	l.appends.Store(0)
	l.armed.Store(true)
	var wg sync.WaitGroup
	wg.Go(first)
	select {
	case <-l.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first write never appended")
	}
	for _, w := range others {
		wg.Go(w)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for memory.BatchQueued(ns) < len(others) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writes queued", memory.BatchQueued(ns), len(others))
		}
		time.Sleep(time.Millisecond)
	}
	close(l.open)
	wg.Wait()
}

func openMem(t *testing.T, l eventlog.Log) *memory.Memories {
	t.Helper()
	m, err := memory.Open(memory.Config{Log: l, Vectors: openStore(t, ""), Now: (&clock{now: t0}).Now, NewID: sequentialIDs()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// addedBy returns, by key, the contents the stream's memory.added events hold.
func addedBy(t *testing.T, l eventlog.Log, ns string) map[string][]string {
	t.Helper()
	events, err := l.Read(testCtx(t), memory.Stream(ns), 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := p.(*messages.MemoryAdded); ok {
			out[a.Key] = append(out[a.Key], a.Memory.Content)
		}
	}
	return out
}

// Writes called at once on one namespace share Appends: 32 adds, an update and
// a forget take 2 Appends (the first, alone, and the rest together), not 34, and
// each is stored once under its key, its answer what the stream holds. Before,
// each write was an Append of its own, one after the other.
func TestNamespaceWritesShareAppends(t *testing.T) {
	l := newGateLog(t, 0)
	m := openMem(t, l)
	ns, err := m.Namespace(testCtx(t), "shared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Add(testCtx(t), "setup", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Bob likes green tea."},
		{Tier: memory.Episodic, Content: "Carol visited Rome."}}); err != nil {
		t.Fatal(err)
	}
	if l.appends.Load() != 1 {
		t.Fatalf("setup: %d appends", l.appends.Load())
	}

	const n = 32
	ids := make([]string, n+1)
	errs := make([]error, n+3)
	add := func(i int) func() {
		return func() {
			res, err := ns.Add(testCtx(t), fmt.Sprintf("k%d", i), []memory.AddRequest{{Tier: memory.Episodic, Content: fmt.Sprintf("Event number %d happened today.", i)}})
			if errs[i] = err; err == nil {
				ids[i] = res[0].ID
			}
		}
	}
	var others []func()
	for i := 1; i <= n; i++ {
		others = append(others, add(i))
	}
	var updated memory.Memory
	others = append(others, func() {
		content := "Bob likes black coffee now."
		updated, errs[n+1] = ns.Update(testCtx(t), "upd", "m0001", memory.UpdateRequest{Content: &content})
	}, func() {
		errs[n+2] = ns.Forget(testCtx(t), "fgt", []string{"m0002"}, "")
	})
	heldBatch(t, l, ns, add(0), others...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := l.appends.Load(); got != 2 {
		t.Fatalf("%d writes called at once took %d Appends; want 2 (the first, then the rest together)", n+3, got)
	}
	by := addedBy(t, l, "shared")
	for i := 0; i <= n; i++ {
		k := fmt.Sprintf("k%d", i)
		want := fmt.Sprintf("Event number %d happened today.", i)
		if len(by[k]) != 1 || by[k][0] != want {
			t.Errorf("key %s: stored %q; want %q once", k, by[k], want)
		}
		if got, ok := ns.Get(ids[i]); !ok || got.Content != want {
			t.Errorf("key %s: its answer %s holds %q", k, ids[i], got.Content)
		}
	}
	if updated.Content != "Bob likes black coffee now." || updated.Vector == nil {
		t.Errorf("update answered %q (vector %d)", updated.Content, len(updated.Vector))
	}
	if _, ok := ns.Get("m0002"); ok {
		t.Error("the forgotten memory is live")
	}
	// The fold of another process reads the same.
	fresh, err := openMem(t, l.Log).Namespace(testCtx(t), "shared")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := len(fresh.Snapshot()), len(ns.Snapshot()); a != b || a != n+2 {
		t.Errorf("a fresh fold holds %d memories, the writer's %d; want %d", a, b, n+2)
	}
}

// A write sent again under its key while its first try waits in the same batch
// is made once: both get the first's answer, the second as a repeat.
func TestNamespaceRetryInOneBatch(t *testing.T) {
	l := newGateLog(t, 0)
	ns, err := openMem(t, l).Namespace(testCtx(t), "retry")
	if err != nil {
		t.Fatal(err)
	}
	req := []memory.AddRequest{{Tier: memory.Semantic, Content: "Dave lives in Oslo."}}
	var res [2][]memory.AddResult
	var errs [2]error
	try := func(i int) func() {
		return func() { res[i], errs[i] = ns.Add(testCtx(t), "same", req) }
	}
	heldBatch(t, l, ns, func() {
		if _, err := ns.Add(testCtx(t), "other", []memory.AddRequest{{Tier: memory.Episodic, Content: "first"}}); err != nil {
			t.Error(err)
		}
	}, try(0), try(1))
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if res[0][0].ID != res[1][0].ID || res[0][0].Event != memory.EventAdd || res[1][0].Event != memory.EventAdd {
		t.Fatalf("answers %v and %v; want the same ADD", res[0], res[1])
	}
	if res[0][0].Repeat == res[1][0].Repeat {
		t.Errorf("answers %v and %v: want one of them a repeat", res[0], res[1])
	}
	if by := addedBy(t, l, "retry"); len(by["same"]) != 1 {
		t.Errorf("the key's memory is stored %d times", len(by["same"]))
	}
	if l.appends.Load() != 2 {
		t.Errorf("%d appends; want 2", l.appends.Load())
	}
}

// An Append that fails in the middle of a batch fails every write of it, stores
// none of them, and leaves nothing of them to read: not in a Get, a search, the
// vector store or the ID index (Locate). Sent again under their keys, each is
// stored once, and found.
func TestNamespaceFailedBatch(t *testing.T) {
	l := newGateLog(t, 2)
	m := openMem(t, l)
	ns, err := m.Namespace(testCtx(t), "failing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Locate(testCtx(t), "none"); err != nil { // builds the ID index
		t.Fatal(err)
	}
	const n = 8
	errs := make([]error, n+1)
	ids := make([]string, n+1)
	add := func(i int) func() {
		return func() {
			res, err := ns.Add(testCtx(t), fmt.Sprintf("k%d", i), []memory.AddRequest{{Tier: memory.Semantic, Content: fmt.Sprintf("Fact number %d about zebras.", i)}})
			if errs[i] = err; err == nil {
				ids[i] = res[0].ID
			}
		}
	}
	var others []func()
	for i := 1; i <= n; i++ {
		others = append(others, add(i))
	}
	heldBatch(t, l, ns, add(0), others...)
	if errs[0] != nil {
		t.Fatalf("the first write: %v", errs[0])
	}
	by := addedBy(t, l, "failing")
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("k%d", i)
		if errs[i] == nil {
			t.Errorf("write %s: no error, though its Append failed", k)
		}
		if len(by[k]) != 0 {
			t.Errorf("write %s: stored %d times after its Append failed", k, len(by[k]))
		}
	}
	if got := len(ns.Snapshot()); got != 1 {
		t.Errorf("the namespace reads %d memories; want the 1 stored", got)
	}
	res, err := ns.Search(testCtx(t), memory.Query{Text: "zebras", Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Errorf("a search finds %d memories; want the 1 stored", len(res))
	}
	// Sent again: each once.
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(add(i))
	}
	wg.Wait()
	by = addedBy(t, l, "failing")
	for i := 0; i <= n; i++ {
		k := fmt.Sprintf("k%d", i)
		if errs[i] != nil {
			t.Fatalf("write %s again: %v", k, errs[i])
		}
		if len(by[k]) != 1 {
			t.Errorf("write %s: stored %d times", k, len(by[k]))
		}
		if c, err := m.Locate(testCtx(t), ids[i]); err != nil || len(c) != 1 || c[0] != "failing" {
			t.Errorf("Locate(%s) of write %s: %v, %v", ids[i], k, c, err)
		}
	}
	res, err = ns.Search(testCtx(t), memory.Query{Text: "zebras", Limit: 20, Mode: memory.ModeVector})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != n+1 {
		t.Errorf("a search by vector finds %d memories; want %d", len(res), n+1)
	}
}

// The working memories that expired are forgotten by the batch that finds them,
// once, ahead of its first write, and stored also when that write fails.
func TestNamespaceBatchExpiresOnce(t *testing.T) {
	c := &clock{now: t0}
	l := newGateLog(t, 0)
	m, err := memory.Open(memory.Config{Log: l, Vectors: openStore(t, ""), Now: c.Now, NewID: sequentialIDs()})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := m.Namespace(testCtx(t), "ttl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Add(testCtx(t), "w", []memory.AddRequest{{Tier: memory.Working, Content: "scratch"}}); err != nil {
		t.Fatal(err)
	}
	failed := make([]error, 4)
	forget := func(i int) func() {
		return func() {
			c.Add(2 * time.Hour) // past the TTL, after the first write decided
			failed[i] = ns.Forget(testCtx(t), fmt.Sprintf("f%d", i), []string{"nope"}, "")
		}
	}
	heldBatch(t, l, ns, func() {
		if _, err := ns.Add(testCtx(t), "a", []memory.AddRequest{{Tier: memory.Episodic, Content: "first"}}); err != nil {
			t.Error(err)
		}
	}, forget(0), forget(1), forget(2), forget(3))
	for _, err := range failed {
		if !errors.Is(err, memory.ErrNotFound) {
			t.Errorf("forgetting an unknown memory: %v", err)
		}
	}
	if l.appends.Load() != 2 {
		t.Errorf("%d appends; want 2", l.appends.Load())
	}
	if _, ok := ns.Get("m0001"); ok {
		t.Error("the expired working memory is live")
	}
	events, err := l.Read(testCtx(t), memory.Stream("ttl"), 1)
	if err != nil {
		t.Fatal(err)
	}
	ttl := 0
	for _, e := range events {
		p, _ := e.Decode()
		if f, ok := p.(*messages.MemoryForgotten); ok && f.Key == "" {
			ttl++
		}
	}
	if ttl != 1 || len(events) != 3 {
		t.Errorf("%d expiries in %d events; want 1 in 3", ttl, len(events))
	}
}
