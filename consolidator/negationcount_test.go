package consolidator_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// mergedAlike reports whether rule 2 merges two semantic memories of contents a
// and b whose vectors are nearly alike (cosine 0.995): whether the plan reads
// their texts as saying the same thing.
func mergedAlike(t *testing.T, a, b string) bool {
	t.Helper()
	x := withVector(mem("a", memory.Semantic, 0.5, 3*24*time.Hour), 1, 0, 0)
	x.Content = a
	y := withVector(mem("b", memory.Semantic, 0.5, 2*24*time.Hour), 0.99, 0.1, 0)
	y.Content = b
	for _, d := range consolidator.Plan(now, []memory.Memory{x, y}, only(consolidator.Policy{DuplicateThreshold: 0.92})) {
		if d.Kind == consolidator.Merge {
			return true
		}
	}
	return false
}

// Two negations are not none: read by their parity, "Bob doesn't drink coffee and
// doesn't eat meat" affirmed as "Bob drinks coffee and eats meat" did and was
// merged with it, and so were "neither … nor", and Spanish or Portuguese that
// negate once in two words ("no come nada"), the fact lost. Texts that negate
// alike in other words merge as before.
func TestPlanCountsNegationsRatherThanTheirParity(t *testing.T) {
	for _, p := range []struct {
		a, b  string
		merge bool
	}{
		{"Bob drinks coffee and eats meat", "Bob doesn't drink coffee and doesn't eat meat", false},
		{"Alice eats meat and fish", "Alice eats neither meat nor fish", false},
		{"Alice come carne todos los días", "Alice no come nada de carne todos los días", false},
		{"O Bruno come carne sempre", "O Bruno não come nunca carne", false},
		{"Bob doesn't drink coffee and eats meat", "Bob doesn't drink coffee and doesn't eat meat", false},
		{"Alice eats neither meat nor fish", "Alice doesn't eat meat or fish", true},
		{"Alice isn't allergic to peanuts", "Alice is not allergic to peanuts", true},
		{"Bob doesn't drink coffee and doesn't eat meat", "Bob does not drink coffee and does not eat meat", true},
	} {
		if got := mergedAlike(t, p.a, p.b); got != p.merge {
			t.Errorf("%q and %q: merged %v, want %v", p.a, p.b, got, p.merge)
		}
	}
}
