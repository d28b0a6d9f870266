package disclosure

import (
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/troupe-run/troupe/internal/cjk"
)

// BM25 ranks documents for a query with Okapi BM25 (k1 = 1.2, b = 0.75) over
// lowercased, lightly stemmed words. It is immutable once built.
type BM25 struct {
	docs  []map[string]int // term frequencies
	lens  []int
	avg   float64
	df    map[string]int
	names []string
}

// Hit is a ranked document.
type Hit struct {
	Name  string
	Score float64
}

// NewBM25 indexes documents, text[i] being the text of the document names[i].
func NewBM25(names, text []string) *BM25 {
	ix := &BM25{df: map[string]int{}, names: slices.Clone(names)}
	total := 0
	for _, t := range text {
		tf := map[string]int{}
		words := Tokenize(t)
		for _, w := range words {
			tf[w]++
		}
		for w := range tf {
			ix.df[w]++
		}
		ix.docs = append(ix.docs, tf)
		ix.lens = append(ix.lens, len(words))
		total += len(words)
	}
	if len(text) > 0 {
		ix.avg = float64(total) / float64(len(text))
	}
	return ix
}

// Search returns the k best documents with a positive score, best first; ties go to
// the name that sorts first, so a query always ranks the same way.
func (ix *BM25) Search(query string, k int) []Hit {
	const k1, b = 1.2, 0.75
	n := float64(len(ix.docs))
	terms := Tokenize(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	var hits []Hit
	for i, tf := range ix.docs {
		score := 0.0
		for _, t := range terms {
			f := float64(tf[t])
			if f == 0 {
				continue
			}
			df := float64(ix.df[t])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			score += idf * f * (k1 + 1) / (f + k1*(1-b+b*float64(ix.lens[i])/ix.avg))
		}
		if score > 0 {
			hits = append(hits, Hit{Name: ix.names[i], Score: score})
		}
	}
	slices.SortFunc(hits, byScore)
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

// stopwords carry no meaning for tool search.
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "in": true, "for": true, "and": true, "or": true,
	"by": true, "with": true, "on": true, "is": true, "it": true, "its": true, "this": true, "that": true,
	"from": true, "as": true, "be": true, "me": true, "my": true, "i": true, "please": true, "you": true,
	"can": true, "at": true, "into": true, "are": true, "was": true, "we": true, "our": true, "your": true,
	"want": true, "need": true, "would": true, "like": true, "some": true, "one": true,
}

// Tokenize splits text into lowercased, stemmed words: on anything but letters and
// digits, and between a lower- and an uppercase letter (camelCase names). A run of
// CJK characters (Han, Hiragana, Katakana, Hangul), written without spaces between
// words, becomes its overlapping character bigrams ("天气预报" → "天气", "气预",
// "预报"; a lone character stays itself), as pipelines/memory's Tokenize makes
// them: a query then meets a description on the words they share. Fullwidth letters,
// digits and punctuation ("ＷＥＡＴＨＥＲ", "，") are their ASCII ones, and halfwidth
// katakana ("ｶﾞｲﾄﾞ") the fullwidth ("ガイド") (cjk.Fold).
func Tokenize(text string) []string {
	var words []string
	var cur, run []rune
	flush := func() {
		if len(cur) > 0 {
			w := strings.ToLower(string(cur))
			if !stopwords[w] {
				words = append(words, stem(w))
			}
			cur = cur[:0]
		}
	}
	flushCJK := func() {
		words = cjk.AppendPairs(words, run)
		run = run[:0]
	}
	var prev rune
	for _, r := range cjk.Fold(text) {
		switch {
		case cjk.Is(r):
			flush()
			run = append(run, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushCJK()
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
			flushCJK()
		}
		prev = r
	}
	flush()
	flushCJK()
	return words
}

// stem strips common English inflections (plurals, -ing, -ed, then a final e, so
// that create, creates, created and creating meet). It is deliberately small; both
// the documents and the queries go through it.
func stem(w string) string {
	w = strip(w)
	if len(w) > 4 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

func strip(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"):
		return w[:len(w)-2]
	case len(w) > 5 && strings.HasSuffix(w, "ing"):
		return w[:len(w)-3]
	case len(w) > 4 && strings.HasSuffix(w, "ed"):
		return w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "es") && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes")):
		return w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		return w[:len(w)-1]
	}
	return w
}

// byScore orders hits best first, and hits of equal score by name.
func byScore(x, y Hit) int {
	if x.Score != y.Score {
		if x.Score > y.Score {
			return -1
		}
		return 1
	}
	return strings.Compare(x.Name, y.Name)
}
