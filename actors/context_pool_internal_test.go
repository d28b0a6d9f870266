package actors

import (
	"testing"

	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// A session whose latest build named nothing to summarise holds no buffer of
// candidates: an idle session keeps none, the next build takes a shared one.
func TestAnIdleSessionHoldsNoCandidates(t *testing.T) {
	s := runStateTask(t, Agents{Default: benchStepAgent()}, "idle")
	if s.Active() != "" {
		t.Fatal("the task is still running")
	}
	if s.ctx.items != nil {
		t.Fatalf("an idle session holds a buffer of %d candidates", cap(*s.ctx.items))
	}
}

// A buffer of candidates given back by one session comes to the next empty: no
// text or message of the other session's build is left in it.
func TestSharedCandidatesComeBackEmpty(t *testing.T) {
	var a, b contextCache
	items := a.takeItems(3)
	msg := runStateTask(t, Agents{Default: benchStepAgent()}, "other").history[0]
	items = append(items, pctx.Item{ID: "system", Text: "the other session's prompt"}, pctx.Item{ID: "task", Message: &msg})
	a.keepItems(items, false)
	if a.items != nil {
		t.Fatal("the buffer is still held after it was given back")
	}
	got := b.takeItems(1)
	if len(got) != 0 {
		t.Fatalf("a taken buffer has %d candidates", len(got))
	}
	for i, it := range got[:cap(got)] {
		if it.ID != "" || it.Text != "" || it.Message != nil {
			t.Fatalf("candidate %d of a taken buffer is %+v", i, it)
		}
	}
}
