package memory_test

import (
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// A fact written to a lasting tier is not answered with a working memory of the
// same text: the working memory goes within its TTL (or past the tier's capacity),
// and the fact acknowledged with its ID would go with it. It is written, in its
// batch too; a working memory of a fact stored in a lasting tier is still that
// memory.
func TestALastingFactIsNotTheDuplicateOfAWorkingMemory(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.WorkingTTL = time.Hour })
	ctx := testCtx(t)
	ns := f.ns(t, "user:eve")
	work := add(t, ns, "k1", memory.AddRequest{Tier: memory.Working, Content: "Eve is allergic to peanuts", Importance: imp(0.3)})
	fact := add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "Eve is allergic to peanuts", Importance: imp(0.9)})
	if fact[0].Event != memory.EventAdd || fact[0].ID == work[0].ID {
		t.Errorf("the semantic fact: %+v, want it added, not the working memory %s", fact[0], work[0].ID)
	}
	batch := add(t, ns, "k3",
		memory.AddRequest{Tier: memory.Working, Content: "Eve flies to Oslo on Friday"},
		memory.AddRequest{Tier: memory.Episodic, Content: "Eve flies to Oslo on Friday"})
	if batch[1].Event != memory.EventAdd || batch[1].ID == batch[0].ID {
		t.Errorf("the batch: %+v, want the episodic memory added beside the working one", batch)
	}
	again := add(t, ns, "k4", memory.AddRequest{Tier: memory.Working, Content: "eve is allergic to peanuts"})
	if again[0].Event != memory.EventNone {
		t.Errorf("a working memory of a stored fact: %+v, want NONE", again[0])
	}
	f.clock.Add(2 * time.Hour) // the working memories expire
	if _, err := ns.Search(ctx, memory.Query{Text: "peanuts"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fact[0].ID, batch[1].ID} {
		if m, ok := ns.Get(id); !ok || m.Tier == memory.Working {
			t.Errorf("memory %s after the working tier's TTL: %+v (%v), want it kept", id, m, ok)
		}
	}
}

// A batch that added a working memory and a lasting one of the same text, sent
// again under its key, gets the IDs it got first.
func TestABatchOfAWorkingAndALastingCopySentAgainGetsItsIDs(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "user:eve")
	reqs := []memory.AddRequest{
		{Tier: memory.Working, Content: "Eve flies to Oslo on Friday"},
		{Tier: memory.Episodic, Content: "Eve flies to Oslo on Friday"},
		{Tier: memory.Working, Content: "eve flies to Oslo on Friday"},
		{Tier: memory.Semantic, Content: "Eve flies to Oslo on Friday"}}
	first := add(t, ns, "k1", reqs...)
	want := []memory.AddResult{{ID: first[0].ID, Event: memory.EventAdd}, {ID: first[1].ID, Event: memory.EventAdd},
		{ID: first[1].ID, Event: memory.EventNone}, {ID: first[1].ID, Event: memory.EventNone}}
	if !slices.Equal(first, want) || first[0].ID == first[1].ID {
		t.Fatalf("first: %+v, want %+v", first, want)
	}
	again := add(t, ns, "k1", reqs...)
	for i := range again {
		again[i].Repeat = false
	}
	if !slices.Equal(again, first) {
		t.Errorf("sent again: %+v, want %+v", again, first)
	}
}

// The write after a task keeps a fact of the turn whose text a working memory
// holds: the working memory goes within the TTL, and the fact would go with it.
func TestRememberKeepsAFactAWorkingMemoryHolds(t *testing.T) {
	turn := userTurn("I like cheese.")
	probe := remember(t, newWriteFixture(t, nil).ns(t, "user:bob"), "a", turn)
	if len(probe) != 1 || probe[0].Event != "ADD" {
		t.Fatalf("the fact of the turn: %+v", probe)
	}
	f := newWriteFixture(t, nil)
	ns := f.ns(t, "user:bob")
	work, err := ns.Add(wctx(t), "w", []memory.AddRequest{{Tier: memory.Working, Content: probe[0].Content}})
	if err != nil {
		t.Fatal(err)
	}
	ds := remember(t, ns, "a", turn)
	if len(ds) != 1 || ds[0].Event != "ADD" || ds[0].MemoryID == work[0].ID {
		t.Fatalf("the fact a working memory (%s) holds: %+v, want it added", work[0].ID, ds)
	}
	if m, ok := ns.Get(ds[0].MemoryID); !ok || m.Tier == memory.Working {
		t.Errorf("the fact's memory: %+v (%v)", m, ok)
	}
}

// A search finds a fact once: a working memory of the text a lasting memory holds
// (the agent's working note, then the fact written to a lasting tier) is left out
// for the lasting one, which a write of either answers with, so that a prompt
// holds the fact once and the search's limit is not spent on its copy. Before,
// both came back and the memories of a prompt held the same line twice.
func TestASearchFindsAFactOnceThoughAWorkingMemoryHoldsItToo(t *testing.T) {
	f := newFixture(t, func(c *memory.Config) { c.WorkingTTL = time.Hour })
	ctx := testCtx(t)
	ns := f.ns(t, "user:eve")
	add(t, ns, "k1", memory.AddRequest{Tier: memory.Working, Content: "Eve is allergic to peanuts", Importance: imp(0.3)})
	fact := add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "eve is allergic to  peanuts", Importance: imp(0.9)})
	add(t, ns, "k3", memory.AddRequest{Tier: memory.Episodic, Content: "At lunch Eve said she is allergic to peanuts"})
	for _, mode := range []string{memory.ModeHybrid, memory.ModeKeyword, memory.ModeVector} {
		got, err := ns.Search(ctx, memory.Query{Text: "peanuts allergic", Mode: mode, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.Memory.ID+" "+string(r.Memory.Tier))
		}
		if len(got) != 2 || !slices.ContainsFunc(got, func(r memory.Result) bool { return r.Memory.ID == fact[0].ID }) ||
			slices.ContainsFunc(got, func(r memory.Result) bool { return r.Memory.Tier == memory.Working }) {
			t.Errorf("%s search: %v, want the semantic fact %s and the episodic memory, not the working copy", mode, ids, fact[0].ID)
		}
	}
}

// A batch of a working memory and a lasting one of the same text that a build
// before lasting writes stopped being the duplicates of working memories wrote
// under its key (the working one added, the lasting one answered NONE with its
// ID), sent again under that key, gets what it got then: before, the lasting one
// was "not among the memories it added", and the retry of the very request the
// key was given for failed as a key reused for another request.
func TestABatchWrittenBeforeLastingCopiesSentAgainGetsItsIDs(t *testing.T) {
	f := newFixture(t)
	const text = "Eve flies to Oslo on Friday"
	recorded(t, f.log, memory.Stream("user:eve"), t0,
		&messages.MemoryAdded{Key: "k1", Reason: "added", Memory: messages.MemoryRecord{MemoryID: "m_1", Tier: "working", Content: text,
			Importance: 0.5, AtUS: t0.UnixMicro(), Hash: pmem.ContentHash(text)}})
	ns := f.ns(t, "user:eve")
	got, err := ns.Add(testCtx(t), "k1", []memory.AddRequest{{Tier: memory.Working, Content: text}, {Tier: memory.Episodic, Content: text}})
	if err != nil {
		t.Fatalf("the batch sent again under its key: %v", err)
	}
	want := []memory.AddResult{{ID: "m_1", Event: memory.EventAdd, Repeat: true}, {ID: "m_1", Event: memory.EventNone, Repeat: true}}
	if !slices.Equal(got, want) {
		t.Errorf("the batch sent again under its key: %+v, want %+v", got, want)
	}
}
