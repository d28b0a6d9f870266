package memory_test

import (
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A forget by criteria forgets only memories that match them when it is written:
// another process that raised a memory's importance past max_importance after the
// tool read the namespace, while its forget was in flight, keeps it. Before, the
// IDs read first were forgotten as they were, and a memory the other process had
// just marked important went.
func TestForgetByCriteriaKeepsAMemoryThatNoLongerMatches(t *testing.T) {
	ctx := testCtx(t)
	log := openLog(t, t.TempDir(), false)
	al := &armedLog{Log: log}
	mine, err := memory.Open(memory.Config{Log: al, Vectors: openStore(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := mine.Namespace(ctx, "agent:planner")
	if err != nil {
		t.Fatal(err)
	}
	res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Episodic, Content: "Alice drank green tea", Importance: imp(0.2)},
		memory.AddRequest{Tier: memory.Episodic, Content: "Bob went to Rome", Importance: imp(0.3)})
	tea, rome := res[0].ID, res[1].ID
	other, err := memory.Open(memory.Config{Log: log, Vectors: openStore(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Namespace(ctx, "agent:planner")
	if err != nil {
		t.Fatal(err)
	}
	box, err := mine.Toolbox(memory.ToolConfig{Namespace: "agent:planner"})
	if err != nil {
		t.Fatal(err)
	}
	al.arm(func() {
		if _, err := theirs.Update(ctx, "their-edit", tea, memory.UpdateRequest{Importance: imp(0.95)}); err != nil {
			t.Error(err)
		}
	})
	var out struct{ Forgotten []string }
	if err := call(t, box, "c1", "forget", `{"max_importance": 0.5, "reason": "unimportant"}`, &out); err != nil {
		t.Fatal(err)
	}
	if m, ok := ns.Get(tea); !ok || m.Importance != 0.95 {
		t.Fatalf("the memory the other process marked important: %+v, live %v; forgotten %v", m, ok, out.Forgotten)
	}
	if _, ok := ns.Get(rome); ok || len(out.Forgotten) != 1 || out.Forgotten[0] != rome {
		t.Fatalf("forgotten %v, want [%s] (the one still unimportant)", out.Forgotten, rome)
	}
}
