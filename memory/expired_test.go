package memory_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A working memory past its TTL is gone, whoever looks first: a search forgets it
// ("ttl: not written for 1h0m0s") and never returns it, and a write forgets it
// before it decides, so Snapshot (what the consolidator plans from, and the memory
// tool's summary shows the agent) does not hold it either.
func TestAnExpiredWorkingMemoryIsNotInTheSnapshot(t *testing.T) {
	for _, first := range []string{"search", "consolidate"} {
		t.Run(first, func(t *testing.T) {
			f := newFixture(t, func(c *memory.Config) { c.WorkingTTL = time.Hour })
			ctx := testCtx(t)
			ns := f.ns(t, "user:alice")
			res, err := ns.Add(ctx, "k1", []memory.AddRequest{{Tier: memory.Working, Content: "Alice is planning a trip to Kyoto", Importance: imp(0.9)}})
			if err != nil {
				t.Fatal(err)
			}
			f.clock.Add(2 * time.Hour) // the node was down; nothing ran
			if first == "search" {
				if _, err := ns.Search(ctx, memory.Query{Text: "Kyoto"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range ns.Snapshot() {
				if m.ID == res[0].ID {
					t.Errorf("Snapshot holds the expired working memory %s", m.ID)
				}
			}
			c, err := consolidator.New(consolidator.Config{Now: f.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Run(ctx, ns, "run1")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Promoted != 0 {
				t.Errorf("the expired working memory was promoted:\n%s", rep)
			}
			if m, ok := ns.Get(res[0].ID); ok && m.Tier == memory.Episodic {
				t.Errorf("the expired working memory lives on as episodic: %+v", m)
			}
		})
	}
}
