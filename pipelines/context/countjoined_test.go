package context

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// countJoined counts a concatenation of parts as Count counts it (a part's
// cached count, even one that is not its text's, standing for its text), for
// parts made of the runes whose pieces run across joins: white space and line breaks,
// punctuation (which takes the line breaks after it), letters and marks, digits
// (in threes), contractions, and bytes that are not UTF-8.
func TestCountJoinedCountsAsTheConcatenation(t *testing.T) {
	atoms := []string{"a", "Z", "é", "e\u0301", "語", "1", "23", "٣", " ", "  ", "\t", "\u00a0", "\n", "\r", "\r\n", "\n\n",
		".", "<", ">", "'", "'s", "'LL", "(", "…", "\xe2", "\x82\xac", "\xff", "word", " word", "/", "_"}
	c := &Cl100k{}
	rng := rand.New(rand.NewPCG(9, 1))
	text := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		return b.String()
	}
	var sc joinScratch
	for range 20000 {
		parts := make([]part, rng.IntN(6))
		whole := ""
		for i := range parts {
			parts[i] = part{text: text(rng.IntN(8)), tokens: -1}
			switch rng.IntN(4) {
			case 0:
				parts[i].text = "\n\n"
			case 1:
				parts[i].tokens = c.Count(parts[i].text)
			case 2:
				parts[i].tokens = c.Count(parts[i].text) + rng.IntN(3) // a cached count that is not the text's
			}
			whole += parts[i].text
		}
		want := c.Count(whole)
		for _, p := range parts {
			if p.tokens >= 0 && p.text != "" { // an empty part is not sent
				want += p.tokens - c.Count(p.text)
			}
		}
		if got := c.countJoined(parts, &sc); got != want {
			t.Fatalf("%#v: countJoined %d, Count of the whole %d", parts, got, want)
		}
	}
}

// A part's count stands for its text between its first and last piece breaks:
// a cached count that is not the text's own (a caller's) moves the total by the
// difference, and only the bytes around the joins are counted.
func TestCountJoinedTakesThePartsCounts(t *testing.T) {
	c := &Cl100k{}
	a, b := "first chunk ends in dots...\r\n", "  second chunk"
	parts := []part{{a, c.Count(a) + 100}, {"\n\n", -1}, {b, c.Count(b) + 10}}
	got := c.countJoined(parts, &joinScratch{})
	if want := c.Count(a+"\n\n"+b) + 110; got != want {
		t.Fatalf("countJoined %d, want %d", got, want)
	}
}
