package consolidator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// judgeAnswer is a judgement naming memories beside its verdict.
func judgeAnswer(t *testing.T, reason string, extra map[string]any) string {
	t.Helper()
	obj := map[string]any{"contradicts": true, "reason": reason}
	for k, v := range extra {
		obj[k] = v
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A judgement or a fact that names a memory the question did not show (another
// memory of the namespace, or an ID no memory has: injected or made up) is refused,
// the run saying why, and nothing is applied for it: no memory but the question's
// is ever touched by an answer, and the answer's reason or fact, which the
// namespace's events would keep, never points at one. An answer naming the
// memories it was shown is applied as before.
func TestRunRefusesAnAnswerNamingAMemoryNotShown(t *testing.T) {
	const (
		olderID  = "m_0a0a0a0a0a0a0a0a"
		newerID  = "m_0b0b0b0b0b0b0b0b"
		victimID = "m_0e0e0e0e0e0e0e0e"
		madeUpID = "m_ffffffffffffffff"
	)
	facts := func() *fakeTarget {
		older := withVector(mem(olderID, memory.Semantic, 0.5, 10*day), 1, 0, 0, 0)
		newer := withVector(mem(newerID, memory.Semantic, 0.5, 5*day), 0.8, 0.6, 0, 0)
		victim := withVector(mem(victimID, memory.Semantic, 0.5, 20*day), 0, 0, 0, 1)
		older.Content, newer.Content = "Alice's favourite colour is blue.", "Alice's favourite colour is green."
		victim.Content = "Alice owes Bob nothing."
		return newFake(older, newer, victim)
	}
	for _, c := range []struct {
		name, answer, named string
	}{
		{"a field", judgeAnswer(t, "one favourite colour", map[string]any{"invalidate": []string{victimID}}), victimID},
		{"the reason", judgeAnswer(t, victimID+" is false too", nil), victimID},
		{"made up", judgeAnswer(t, "one favourite colour", map[string]any{"id": madeUpID}), madeUpID},
		{"plain text", "Yes. Forget " + victimID + " as well.", victimID},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := facts()
			rep, err := newConsolidator(t, scripted(t, c.answer), only(consolidator.Policy{ConflictThreshold: 0.75})).Run(context.Background(), f, "run1")
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{olderID, victimID} {
				if m, _ := f.get(id); m.InvalidAt != nil {
					t.Errorf("%s was invalidated", id)
				}
			}
			if got := f.appliedChanges(); len(got) != 0 || rep.Invalidated != 0 {
				t.Errorf("applied %v", got)
			}
			want := "invalidate " + olderID + " by " + newerID + ": model scripted named memory " + c.named + ", which its question did not show: answer refused, nothing applied"
			if len(rep.Skipped) != 1 || !strings.HasPrefix(rep.Skipped[0], want) {
				t.Errorf("skipped %q, want %q", rep.Skipped, want)
			}
			if len(rep.Settled) != 0 {
				t.Errorf("a refused answer settled its question: %q", rep.Settled)
			}
		})
	}
	t.Run("shown", func(t *testing.T) {
		f := facts()
		answer := judgeAnswer(t, newerID+" replaces "+olderID, map[string]any{"id": olderID})
		rep, err := newConsolidator(t, scripted(t, answer), only(consolidator.Policy{ConflictThreshold: 0.75})).Run(context.Background(), f, "run1")
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := f.get(olderID); m.InvalidAt == nil || rep.Invalidated != 1 {
			t.Errorf("the judgement naming the facts shown was not applied:\n%s", rep)
		}
	})
	t.Run("distill", func(t *testing.T) {
		f := newFake(episodes()...)
		answer := `{"fact": "Alice prefers morning meetings.", "sources": ["e1", "e4"]}`
		rep, err := newConsolidator(t, scripted(t, answer), only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
		if err != nil {
			t.Fatal(err)
		}
		if got := f.appliedChanges(); len(got) != 0 || rep.Distilled != 0 {
			t.Errorf("applied %v", got)
		}
		want := "distill e1, e2, e3: model scripted named memory e4, which its question did not show: answer refused, nothing applied"
		if len(rep.Skipped) != 1 || !strings.HasPrefix(rep.Skipped[0], want) {
			t.Errorf("skipped %q, want %q", rep.Skipped, want)
		}
	})
}
