package consolidator_test

import "testing"

// A number written in words is read whole, as its digits are: read word by word,
// "twenty-one" was 20 and 1, never 21, and "one hundred" never 100, so that each
// was kept apart from the same fact in digits for ever; "one hundred and one" and
// "one hundred" were alike (1 and 100 each), and so were "the fourteenth floor" and
// "the fifteenth floor" (no ordinal past twelfth was read), the other fact lost.
func TestPlanReadsNumberWordsWhole(t *testing.T) {
	for _, p := range []struct {
		a, b  string
		merge bool
	}{
		{"Alice's daughter turns twenty-one in June", "Alice's daughter turns 21 in June", true},
		{"The warehouse holds one hundred pallets of flour", "The warehouse holds 100 pallets of flour", true},
		{"Bob was born in nineteen ninety-five", "Bob was born in 1995", true},
		{"The order is for two dozen bagels", "The order is for 24 bagels", true},
		{"Alice's flight leaves on May thirteenth", "Alice's flight leaves on May 13", true},
		{"No one at the office knows the code of the safe", "Nobody at the office knows the code of the safe", true},
		{"Alice's office is on the fourteenth floor", "Alice's office is on the fifteenth floor", false},
		{"The atlas holds one hundred and one maps", "The atlas holds one hundred maps", false},
		{"Alice's daughter turns twenty-one in June", "Alice's daughter turns twenty-two in June", false},
		{"The warehouse holds one hundred pallets of flour", "The warehouse holds one thousand pallets of flour", false},
	} {
		if got := mergedAlike(t, p.a, p.b); got != p.merge {
			t.Errorf("%q and %q: merged %v, want %v", p.a, p.b, got, p.merge)
		}
	}
}
