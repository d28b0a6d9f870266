package memory

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"

	"github.com/troupe-run/troupe/internal/cjk"
	"golang.org/x/text/unicode/norm"
)

// Bounds on the work Tokenize does, whatever the input.
const (
	// MaxTokenizeBytes is how much of a text Tokenize reads; the rest is ignored.
	MaxTokenizeBytes = 1 << 20
	// MaxWordRunes is the longest word Tokenize keeps; longer runs of letters and
	// digits (hashes, base64) are cut to this length.
	MaxWordRunes = 64
)

// stopwords are English words too common to tell memories apart. Both the indexed
// text and the query drop them.
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		a about above after again against all am an and any are as at be because been
		before being below between both but by can could did do does doing don down
		during each few for from further had has have having he her here hers herself
		him himself his how i if in into is it its itself just me more most my myself
		no nor not now of off on once only or other our ours ourselves out over own
		same she should so some such than that the their theirs them themselves then
		there these they this those through to too under until up very was we were
		what when where which while who whom why will with would you your yours
		yourself yourselves s t d ll m re ve also let lets im ive youre dont doesnt
		didnt isnt arent wasnt werent cant wont`) {
		m[w] = true
	}
	return m
}()

// Tokenize splits text into search terms:
//
//   - words are runs of Unicode letters and digits, lowercased; everything else
//     (punctuation, spaces, emoji, symbols) separates them. An apostrophe between
//     letters stays inside the word, and a possessive 's is dropped ("Alice's" →
//     "alice", "don't" → "dont");
//   - English stopwords are dropped;
//   - words get a light, conservative stemming (see stem): plurals, -ing and -ed;
//   - runs of CJK characters (Han, Hiragana, Katakana, Hangul) become overlapping
//     character bigrams ("東京都" → "東京", "京都"), a lone character stays a unigram,
//     so text without spaces is still searchable;
//   - the text is read in Unicode NFC, so that a composed "é" (U+00E9) and a
//     decomposed one (e + U+0301) are the same letter;
//   - work is bounded: only the first MaxTokenizeBytes bytes are read and words are
//     cut to MaxWordRunes runes.
//
// Documents and queries must both go through Tokenize.
func Tokenize(text string) []string { return TokenizeStem(text, stem) }

// TokenizeStem is Tokenize with another stemmer in place of its light English
// one: stem is given each lowercased word that is not a stopword nor CJK (nil:
// words are kept as they are).
func TokenizeStem(text string, stem func(string) string) []string {
	if len(text) > MaxTokenizeBytes {
		text = text[:MaxTokenizeBytes]
	}
	// One spelling of "café" (U+00E9), whichever the text has: the decomposed one
	// (e + U+0301, as macOS file names and some keyboards write it) would be the
	// word "cafe" and an accent that separates words, and a query typed composed
	// would not find it. And one width of each character: "ｉＰｈｏｎｅ", as an input
	// method types it in its full-width mode, is "iPhone", the ideographic space a
	// space, and halfwidth katakana (ｶﾞｲﾄﾞ) the fullwidth (ガイド) (cjk.Fold, which
	// folds all that cjk.Narrow does, and gives NFC).
	text = cjk.Fold(text)
	var (
		words []string
		word  []rune
		run   []rune
	)
	flushWord := func() {
		if len(word) == 0 {
			return
		}
		w := strings.ToLower(string(word))
		word = word[:0]
		w = strings.TrimSuffix(w, "'s")
		w = strings.ReplaceAll(w, "'", "")
		if w == "" || stopwords[w] {
			return
		}
		if stem != nil {
			w = stem(w)
		}
		words = append(words, w)
	}
	flushCJK := func() {
		words = cjk.AppendPairs(words, run)
		run = run[:0]
	}
	runes := []rune(text)
	for i, r := range runes {
		switch {
		case cjk.Is(r):
			flushWord()
			run = append(run, unicode.ToLower(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushCJK()
			if len(word) < MaxWordRunes {
				word = append(word, r)
			}
		case (r == '\'' || r == '’') && len(word) > 0 && i+1 < len(runes) && unicode.IsLetter(runes[i+1]) && !cjk.Is(runes[i+1]):
			if len(word) < MaxWordRunes {
				word = append(word, '\'')
			}
		default:
			flushWord()
			flushCJK()
		}
	}
	flushWord()
	flushCJK()
	return words
}

// stem strips common English inflections, conservatively: it would rather miss a
// match than merge two different words.
//
//	cities → city, classes → class, boxes → box, dogs → dog (but not bus, class, this)
//	running → run, played → play, stopped → stop, falling → fall
//	create, creates, created, creating → creat
//	string, thing, need, speed stay as they are (the stem would have no vowel, or the
//	word ends in -eed, or is too short)
//
// A final e is dropped from words of five or more letters once any suffix is gone, so
// that create, creates, created and creating meet; shorter words keep it.
func stem(w string) string {
	if !isASCIILower(w) {
		return w
	}
	n := len(w)
	switch {
	case n >= 5 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case strings.HasSuffix(w, "sses"):
		return w[:n-2]
	case n >= 5 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "zzes")):
		return w[:n-2]
	case n >= 4 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return dropE(w[:n-1])
	case n >= 6 && strings.HasSuffix(w, "ing") && hasVowel(w[:n-3]):
		return undouble(w[:n-3])
	case n >= 5 && strings.HasSuffix(w, "ed") && !strings.HasSuffix(w, "eed") && hasVowel(w[:n-2]):
		return undouble(w[:n-2])
	}
	return dropE(w)
}

// dropE drops the final e of a word of five or more letters.
func dropE(w string) string {
	if len(w) >= 5 && strings.HasSuffix(w, "e") {
		return w[:len(w)-1]
	}
	return w
}

// undouble turns a stem that ends in a doubled consonant (runn, stopp) into its
// single form; ll, ss and zz stay (fall, miss, buzz).
func undouble(w string) string {
	n := len(w)
	if n >= 3 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouylsz", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}

func hasVowel(w string) bool { return strings.ContainsAny(w, "aeiouy") }

func isASCIILower(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// Normalize is the form ContentHash hashes: Unicode NFC, fullwidth letters, digits,
// punctuation and ideographic spaces as their ASCII (cjk.Narrow), lowercased,
// trimmed, with every run of whitespace collapsed to one space, and without the
// characters that show nothing (invisible): two texts that read the same are one.
func Normalize(text string) string {
	return strings.Join(strings.Fields(strings.ToLower(norm.NFC.String(cjk.Narrow(invisible.Replace(text))))), " ")
}

// invisible removes the format characters that neither show nor change how the text
// around them shows: the zero width space, the word joiner, the zero width no-break
// space (a byte order mark pasted in) and the soft hyphen. The zero width joiner and
// non-joiner stay: they change how Persian, Indic scripts and emoji are drawn.
var invisible = strings.NewReplacer("\u200b", "", "\u2060", "", "\ufeff", "", "\u00ad", "")

// ContentHash is the hex SHA-256 of Normalize(text): two memories with the same hash
// are exact duplicates up to Unicode composition, the width of letters and digits,
// case, whitespace and invisible characters.
func ContentHash(text string) string {
	sum := sha256.Sum256([]byte(Normalize(text)))
	return hex.EncodeToString(sum[:])
}
