package memory_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// Memories and blocks an older build stored with NUL bytes (content holding one is
// refused on write now) are read without them: no prompt, answer or history gets
// them, a search finds the memory by the word the NUL split ("Os\x00lo": Oslo), and
// the same fact written now is its exact duplicate. Before, the content came back
// with its NUL, a search for Oslo found nothing and the fact was stored twice.
func TestMemoriesStoredWithNULsAreReadWithout(t *testing.T) {
	f := newFixture(t)
	vectors, err := llm.HashingEmbedder{}.Embed(testCtx(t), []string{"Alice lives in Os\x00lo.", "Alice met Bob about the budget."})
	if err != nil {
		t.Fatal(err)
	}
	record := func(id, tier, content, outcome string, v []float32) messages.MemoryRecord {
		return messages.MemoryRecord{MemoryID: id, Tier: tier, Content: content, Outcome: outcome, Importance: 0.5,
			AtUS: t0.UnixMicro(), Hash: pmem.ContentHash(content), Vector: v}
	}
	recorded(t, f.log, memory.Stream("user:alice"), t0,
		&messages.MemoryAdded{Reason: "added", Memory: record("m_1", "semantic", "Alice lives in Os\x00lo.", "", vectors[0])},
		&messages.MemoryAdded{Reason: "added", Memory: record("m_2", "episodic", "Alice met Bob about the budget.", "agreed\x00 on 10k", vectors[1])},
		&messages.MemoryBlockSet{Reason: "core_memory_append", Label: "human", Value: "Name: Ali\x00ce.", Limit: 2000},
	)
	ns := f.ns(t, "user:alice")
	if m, ok := ns.Get("m_1"); !ok || m.Content != "Alice lives in Oslo." {
		t.Errorf("m_1 = %q (%v)", m.Content, ok)
	}
	if m, ok := ns.Get("m_2"); !ok || m.Outcome != "agreed on 10k" {
		t.Errorf("m_2's outcome = %q (%v)", m.Outcome, ok)
	}
	for _, b := range ns.Blocks() {
		if strings.IndexByte(b.Value, 0) >= 0 {
			t.Errorf("block %s = %q", b.Label, b.Value)
		}
	}
	res, err := ns.Search(testCtx(t), memory.Query{Text: "Oslo", Mode: memory.ModeKeyword})
	if err != nil || len(res) != 1 || res[0].Memory.ID != "m_1" {
		t.Errorf("keyword search for Oslo: %+v, %v", res, err)
	}
	for _, m := range ns.Snapshot() {
		if strings.IndexByte(m.Content, 0) >= 0 || strings.IndexByte(m.Outcome, 0) >= 0 {
			t.Errorf("snapshot: %s %q %q", m.ID, m.Content, m.Outcome)
		}
	}
	hist, err := ns.History(testCtx(t), "m_1")
	if err != nil || len(hist) != 1 || hist[0].Memory == nil || hist[0].Memory.Content != "Alice lives in Oslo." {
		t.Errorf("history: %+v, %v", hist, err)
	}
	added := add(t, ns, "again", memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Oslo."})
	if len(added) != 1 || added[0].Event != memory.EventNone || added[0].ID != "m_1" {
		t.Errorf("the same fact written now: %+v, want NONE with m_1", added)
	}
}
