package knowledge

import (
	"strings"
	"sync"
	"unicode"

	"github.com/kljensen/snowball/english"

	"github.com/troupe-run/troupe/internal/cjk"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// maxIdentifierBytes bounds an identifier term: longer runs (URLs, paths) keep
// their parts only.
const maxIdentifierBytes = 96

// terms is the tokenizer of a knowledge base's BM25 index, for chunks and queries
// alike: pipelines/memory's Tokenize (Unicode letters and digits, lowercased,
// English stopwords dropped, a light English stemming, CJK bigrams), plus each
// identifier whole — a run of letters and digits joined by '-', '_', '.', ':', '/'
// or '@' inside it, lowercased: "PAY-4013" gives pay, 4013 and pay-4013;
// "max_connections" gives max, connection and max_connections; "v2.3.5" gives v2, 3,
// 5 and v2.3.5. The parts find "PAY 4013" or "max connections"; the whole term is
// rare, so an exact identifier outweighs documents that hold its parts apart
// (PAY-4013 against PAY-4031 and a 4013 elsewhere).
func terms(text string) []string { return termsWith(text, stemTerm) }

// termsWith is terms with stem as its stemmer.
func termsWith(text string, stem func(string) string) []string {
	out := pmem.TokenizeStem(text, stem)
	if len(text) > pmem.MaxTokenizeBytes {
		text = text[:pmem.MaxTokenizeBytes]
	}
	text = cjk.Fold(text) // as TokenizeStem reads it: one width, one spelling
	alnum := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	joiner := func(r rune) bool { return strings.ContainsRune("-_.:/@", r) }
	start, joins := -1, 0 // start of the current run, joiners inside it
	var prev rune
	flush := func(end int) {
		if start >= 0 && joins > 0 {
			if id := text[start:end]; len(id) <= maxIdentifierBytes {
				out = append(out, strings.ToLower(id))
			}
		}
		start, joins = -1, 0
	}
	for i, r := range text {
		switch {
		case alnum(r):
			if start < 0 {
				start = i
			} else if joiner(prev) {
				joins++
			}
		case joiner(r) && start >= 0 && alnum(prev):
			// a joiner inside a run: the run goes on if a letter or digit follows
		default:
			if start >= 0 {
				end := i
				if joiner(prev) {
					end -= utf8Len(prev)
				}
				flush(end)
			}
		}
		prev = r
	}
	if start >= 0 {
		end := len(text)
		if joiner(prev) {
			end -= utf8Len(prev)
		}
		flush(end)
	}
	return out
}

func utf8Len(r rune) int { return len(string(r)) }

// stemTerm is Snowball's English stemmer (Porter2) for words of ASCII letters;
// words with digits or other letters are kept as they are.
func stemTerm(w string) string {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return w
		}
	}
	return english.Stem(w, true)
}

// maxStems bounds a stemCache: past it the cache starts over.
const maxStems = 1 << 17

// stemCache remembers stemTerm's stems: a knowledge base's texts repeat their
// words, and stemming is most of the cost of indexing a chunk. A base has one; it
// is safe for concurrent use.
type stemCache struct {
	mu    sync.Mutex
	stems map[string]string
}

// stem is stemTerm, remembered.
func (c *stemCache) stem(w string) string {
	c.mu.Lock()
	s, ok := c.stems[w]
	c.mu.Unlock()
	if ok {
		return s
	}
	s = stemTerm(w)
	c.mu.Lock()
	if c.stems == nil || len(c.stems) >= maxStems {
		c.stems = make(map[string]string, 1024)
	}
	c.stems[strings.Clone(w)] = s
	c.mu.Unlock()
	return s
}

// terms is the package's terms with the cache's stems.
func (c *stemCache) terms(text string) []string { return termsWith(text, c.stem) }
