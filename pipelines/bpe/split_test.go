package bpe

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/pipelines/bpe/bpetest"
)

// TestSplitsAsTiktoken compares each scanner's pieces with those tiktoken-go's
// regular expression finds, on random texts of letters of every case (upper,
// lower, title, modifier, other, marks), contractions of either case, digits,
// punctuation, white space of every kind and any runes. Counts alone would miss
// a piece cut in the wrong place where no token spans the cut.
func TestSplitsAsTiktoken(t *testing.T) {
	atoms := []string{"A", "B", "T", "S", "E", "a", "e", "s", "ª", "º", "ʰ", "ˈ", "\u0301", "\u0308", "\u0903", "日", "ǅ", "'", "'s", "'S", "'ll", "'Re", "'VE",
		" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\u3000", "x", "THE", "ING", "É", "И", "и", "ー", "ア", "1", "234", "٣", "½", "/", "!", ".", "ſ", "K", "🙂", "\uFFFD"}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for _, name := range []string{"cl100k_base", "o200k_base", "r50k_base"} {
		ref, err := bpetest.New(name)
		if err != nil {
			t.Fatal(err)
		}
		_, next, _ := encoding(name)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range n {
			var b strings.Builder
			if i%4 == 0 {
				for range rng.IntN(20) {
					if r := rune(rng.IntN(0x3100)); utf8.ValidRune(r) {
						b.WriteRune(r)
					}
				}
			} else {
				for range 1 + rng.IntN(10) {
					b.WriteString(atoms[rng.IntN(len(atoms))])
				}
			}
			text := b.String()
			var got []string
			for i := 0; i < len(text); {
				j := next(text, i)
				got = append(got, text[i:j])
				i = j
			}
			if want := ref.Pieces(text); !slices.Equal(got, want) {
				t.Fatalf("%s: %q: pieces %q, tiktoken-go's %q", name, text, got, want)
			}
		}
	}
}
