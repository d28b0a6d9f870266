package memory_test

import (
	"testing"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// marks returns the memory.remembered events of the namespace's stream.
func (f *writeFixture) marks(t *testing.T, ns string) []*messages.MemoryRemembered {
	t.Helper()
	events, err := f.log.Read(wctx(t), memory.Stream(ns), 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []*messages.MemoryRemembered
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := p.(*messages.MemoryRemembered); ok {
			out = append(out, r)
		}
	}
	return out
}

// A Remember with Mark that wrote nothing (no fact in the turn, or each fact
// NONE) ends with one memory.remembered under its key, which RememberedUnder
// reports done, here and after a refold by another process; performed again it
// marks nothing twice. One that wrote facts is known by them and marks nothing.
// The mark changes no memory: a memory's history, the stats and a consolidation
// pass do not see it.
func TestRememberMarksATurnThatWroteNothing(t *testing.T) {
	f := newWriteFixture(t, nil)
	ns := f.ns(t, "user:bob")
	mark := func(key string, turn memory.Turn) []memory.Decision {
		t.Helper()
		ds, err := ns.Remember(wctx(t), key, turn, memory.RememberOptions{Mark: true})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}

	// Facts written: no mark, known by its facts' keys.
	if ds := mark("s-1/2/t1", userTurn("I live in Paris. I like cheese.")); len(ds) != 2 || ds[0].Event != memory.EventAdd {
		t.Fatalf("first turn: %+v", ds)
	}
	if !ns.RememberedUnder("s-1/2/t1") || len(f.marks(t, "user:bob")) != 0 {
		t.Fatalf("a turn that wrote facts: remembered %v, marks %+v", ns.RememberedUnder("s-1/2/t1"), f.marks(t, "user:bob"))
	}

	// No fact in the turn.
	if ns.RememberedUnder("s-1/4/t2") {
		t.Fatal("a turn never remembered reports remembered")
	}
	if ds := mark("s-1/4/t2", userTurn("What time is it?")); len(ds) != 0 {
		t.Fatalf("a turn without a fact: %+v", ds)
	}
	// Each fact NONE: known already.
	if ds := mark("s-1/6/t3", userTurn("I like cheese.")); len(ds) != 1 || ds[0].Event != memory.EventNone {
		t.Fatalf("a turn of a known fact: %+v", ds)
	}
	// Performed again (a retry, a second node's recovery): no second mark.
	mark("s-1/4/t2", userTurn("What time is it?"))
	mark("s-1/6/t3", userTurn("I like cheese."))
	got := f.marks(t, "user:bob")
	want := []messages.MemoryRemembered{
		{Key: "s-1/4/t2", Reason: "remembered: nothing to keep: no fact in the turn", Facts: 0},
		{Key: "s-1/6/t3", Reason: "remembered: nothing to keep: 1 fact, NONE", Facts: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("marks %+v, want %+v", got, want)
	}
	for i := range want {
		if *got[i] != want[i] {
			t.Errorf("mark %d: %+v, want %+v", i, *got[i], want[i])
		}
	}
	if !ns.RememberedUnder("s-1/4/t2") || !ns.RememberedUnder("s-1/6/t3") {
		t.Error("a marked turn does not report remembered")
	}
	// Without Mark (as before), nothing is written for such a turn.
	if _, err := ns.Remember(wctx(t), "s-1/8/t4", userTurn("What time is it?"), memory.RememberOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns.RememberedUnder("s-1/8/t4") || len(f.marks(t, "user:bob")) != 2 {
		t.Error("a Remember without Mark marked its turn")
	}

	// Another process folds the stream: the marks are known, the memories the same.
	store, err := vectorstore.Open(vectorstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	other, err := memory.Open(memory.Config{Log: f.log, Vectors: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ons, err := other.Namespace(wctx(t), "user:bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := ons.Refresh(wctx(t)); err != nil {
		t.Fatal(err)
	}
	if !ons.RememberedUnder("s-1/4/t2") || !ons.RememberedUnder("s-1/6/t3") || ons.RememberedUnder("s-1/8/t4") {
		t.Error("a refold does not know the marks")
	}
	if a, b := len(ons.Snapshot()), len(ns.Snapshot()); a != 2 || a != b {
		t.Errorf("the refold holds %d memories, the writer %d, want 2", a, b)
	}
	if st := ons.Stats(); st.Tiers[memory.Semantic].Count+st.Tiers[memory.Episodic].Count != 2 {
		t.Errorf("stats after the marks: %+v", st)
	}
	for _, m := range ons.Snapshot() {
		h, err := ons.History(wctx(t), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range h {
			if c.Type == messages.TypeMemoryRemembered {
				t.Errorf("history of %s holds a mark: %+v", m.ID, c)
			}
		}
	}
	c, err := consolidator.New(consolidator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(wctx(t), ons, "consolidate/1"); err != nil {
		t.Fatalf("a consolidation over the marks: %v", err)
	}
}
