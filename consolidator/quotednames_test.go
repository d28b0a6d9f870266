package consolidator_test

import "testing"

// A name in single quotes is a name: its word started with the quote, not with a
// capital, so that "The project is called 'Phoenix'" and "… 'Atlas'" were merged
// (a name in double quotes was not), the other fact lost. The same name quoted
// in one and bare in the other merges as before.
func TestPlanReadsANameInSingleQuotes(t *testing.T) {
	for _, p := range []struct {
		a, b  string
		merge bool
	}{
		{"The project Alice leads is called 'Phoenix'", "The project Alice leads is called 'Atlas'", false},
		{"'Phoenix' is the project Alice leads", "'Atlas' is the project Alice leads", false},
		{"The project Alice leads is called 'Phoenix'", "The project Alice leads is called Phoenix", true},
	} {
		if got := mergedAlike(t, p.a, p.b); got != p.merge {
			t.Errorf("%q and %q: merged %v, want %v", p.a, p.b, got, p.merge)
		}
	}
}
