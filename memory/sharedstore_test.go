package memory_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A vector store that holds items of the namespace the log never had — the store
// outlived the log (a data directory started afresh on the same Milvus), or
// another deployment shares the store and the namespace's name — does not hide
// the namespace's own memories from a vector search, however many of those items
// rank above them; and the search deletes none of them.
func TestVectorSearchIsNotCrowdedOutByItemsTheLogNeverHad(t *testing.T) {
	f := newFixture(t)
	other, err := memory.Open(memory.Config{Log: openLog(t, t.TempDir(), false), Vectors: f.store})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Namespace(testCtx(t), "user:shared")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []memory.AddRequest
	for i := range 60 {
		reqs = append(reqs, memory.AddRequest{Tier: memory.Episodic, Content: fmt.Sprintf("green tea w%03d", i)})
	}
	add(t, theirs, "theirs", reqs...)

	ns := f.ns(t, "user:shared")
	mine := add(t, ns, "mine", memory.AddRequest{Tier: memory.Episodic, Content: "Alice drinks green tea every morning before work"})
	for _, limit := range []int{1, 10} {
		res, err := ns.Search(testCtx(t), memory.Query{Text: "green tea", Mode: memory.ModeVector, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Memory.ID != mine[0].ID {
			t.Errorf("vector search, limit %d: %+v; want only %s, the namespace's own memory", limit, res, mine[0].ID)
		}
	}
	if n := vectorCount(t, f.store, "user:shared"); n != 61 {
		t.Errorf("%d vectors of user:shared in the store after the search, want 61: the other's 60 and ours", n)
	}
}
