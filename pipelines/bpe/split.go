package bpe

import (
	"unicode"
	"unicode/utf8"
)

// The scanners below each return the end of the piece that starts at i in s (a
// valid UTF-8 text), as the encoding's pattern matches it in tiktoken-go: a
// backtracking engine (regexp2) that takes the leftmost alternative that
// matches, with greedy quantifiers, and reads \s, \p{L}, \p{N} and the other
// classes as the unicode package does (unicode.IsSpace, unicode.IsLetter,
// unicode.IsNumber, unicode.In) and (?i) as unicode.ToLower. Each looks at a
// rune at most a few times, so a split is linear in the text's length.

// cl100kNext scans cl100k_base's pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kNext(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	if j, ok := contraction(s, i, true); ok {
		return j
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if unicode.IsLetter(r) {
		return letters(s, i+w)
	}
	if r != '\r' && r != '\n' && !unicode.IsNumber(r) && i+w < len(s) {
		if b, _ := utf8.DecodeRuneInString(s[i+w:]); unicode.IsLetter(b) {
			return letters(s, i+w)
		}
	}
	// \p{N}{1,3}
	if unicode.IsNumber(r) {
		return digits3(s, i+w)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if j, ok := punctuation(s, i, r, w, "\r\n"); ok {
		return j
	}
	return spaces(s, i, true)
}

// o200kNext scans o200k_base's pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Call [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] "upper" and [\p{Ll}\p{Lm}\p{Lo}\p{M}]
// "lower" (a rune can be both). The engine tries the first two alternatives
// with the leading rune and then without it before it moves on.
func o200kNext(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	lead := r != '\r' && r != '\n' && !unicode.IsLetter(r) && !unicode.IsNumber(r) && i+w < len(s)
	if lead {
		if j := upperThenLower(s, i+w); j >= 0 {
			return contractionAfter(s, j)
		}
	}
	if j := upperThenLower(s, i); j >= 0 {
		return contractionAfter(s, j)
	}
	if lead {
		if j := upperAndLower(s, i+w); j >= 0 {
			return contractionAfter(s, j)
		}
	}
	if j := upperAndLower(s, i); j >= 0 {
		return contractionAfter(s, j)
	}
	if unicode.IsNumber(r) {
		return digits3(s, i+w)
	}
	if j, ok := punctuation(s, i, r, w, "\r\n/"); ok {
		return j
	}
	return spaces(s, i, true)
}

// gpt2Next scans the pattern of p50k_base, p50k_edit and r50k_base:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Next(s string, i int) int {
	if j, ok := contraction(s, i, false); ok {
		return j
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	j := i // where the run starts: past a leading space followed by its rune
	if r == ' ' && i+1 < len(s) {
		if b, _ := utf8.DecodeRuneInString(s[i+1:]); !unicode.IsSpace(b) {
			j, r = i+1, b
		}
	}
	switch {
	case unicode.IsLetter(r):
		return letters(s, j)
	case unicode.IsNumber(r):
		return numbers(s, j)
	case !unicode.IsSpace(r):
		return others(s, j)
	}
	return spaces(s, i, false)
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i, ignoring case if fold.
func contraction(s string, i int, fold bool) (int, bool) {
	if i+1 >= len(s) || s[i] != '\'' {
		return i, false
	}
	lower := func(r rune) rune {
		if fold {
			return unicode.ToLower(r)
		}
		return r
	}
	a, aw := utf8.DecodeRuneInString(s[i+1:])
	switch lower(a) {
	case 's', 't', 'm', 'd':
		return i + 1 + aw, true
	case 'r', 'v', 'l':
		if k := i + 1 + aw; k < len(s) {
			b, bw := utf8.DecodeRuneInString(s[k:])
			want := rune('e')
			if lower(a) == 'l' {
				want = 'l'
			}
			if lower(b) == want {
				return k + bw, true
			}
		}
	}
	return i, false
}

// contractionAfter returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d)? at j.
func contractionAfter(s string, j int) int {
	k, _ := contraction(s, j, true)
	return k
}

// upper reports whether r is in [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}].
func upper(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// lower reports whether r is in [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func lower(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// upperThenLower returns the end of upper*lower+ at j, or -1. upper* takes the
// longest run and gives back a rune at a time until lower+ matches: so lower+
// starts at the last lower rune of the run, or just past the run.
func upperThenLower(s string, j int) int {
	lastLowerEnd := -1 // end of the last rune of the upper run that is lower too
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !upper(r) {
			break
		}
		j += w
		if lower(r) {
			lastLowerEnd = j
		}
	}
	if j < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[j:]); lower(r) {
			return lowers(s, j)
		}
	}
	// lower+ from the last lower rune of the run: the runes after it are upper
	// and not lower, and so is the one after the run (else it matched above).
	return lastLowerEnd
}

// upperAndLower returns the end of upper+lower* at j, or -1.
func upperAndLower(s string, j int) int {
	start := j
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !upper(r) {
			break
		}
		j += w
	}
	if j == start {
		return -1
	}
	return lowers(s, j)
}

// lowers returns the end of the run of lower runes from j.
func lowers(s string, j int) int {
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !lower(r) {
			break
		}
		j += w
	}
	return j
}

// letters returns the end of the run of letters from j.
func letters(s string, j int) int {
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(r) {
			break
		}
		j += w
	}
	return j
}

// numbers returns the end of the run of numbers from j.
func numbers(s string, j int) int {
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsNumber(r) {
			break
		}
		j += w
	}
	return j
}

// digits3 returns the end of \p{N}{1,3} whose first rune ends at j.
func digits3(s string, j int) int {
	for k := 1; k < 3 && j < len(s); k++ {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsNumber(r) {
			break
		}
		j += w
	}
	return j
}

// others returns the end of the run from j of runes that are neither white
// space, letters nor numbers.
func others(s string, j int) int {
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if unicode.IsSpace(r) || unicode.IsLetter(r) || unicode.IsNumber(r) {
			break
		}
		j += w
	}
	return j
}

// punctuation matches " ?[^\s\p{L}\p{N}]+[tail]*" at i, whose rune r is w bytes
// long; tail holds ASCII bytes only.
func punctuation(s string, i int, r rune, w int, tail string) (int, bool) {
	j := i
	if r == ' ' {
		j += w
	}
	k := others(s, j)
	if k == j {
		return i, false
	}
	for k < len(s) && contains(tail, s[k]) {
		k++
	}
	return k, true
}

func contains(set string, b byte) bool {
	for i := range len(set) {
		if set[i] == b {
			return true
		}
	}
	return false
}

// spaces matches the white space at i: \s*[\r\n]+ if newlines, then
// \s+(?!\S), then \s+. Only white space is left to match at i when it is called;
// it returns at least one rune past i whatever is there.
func spaces(s string, i int, newlines bool) int {
	j, lastNewline := i, -1
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsSpace(r) {
			break
		}
		j += w
		if newlines && (r == '\r' || r == '\n') {
			lastNewline = j
		}
	}
	switch {
	case j == i: // not white space after all: one rune
		_, w := utf8.DecodeRuneInString(s[i:])
		return i + w
	case lastNewline >= 0: // \s*[\r\n]+
		return lastNewline
	case j == len(s): // \s+(?!\S) at the end
		return j
	}
	// \s+(?!\S): all but the run's last rune, if that leaves one; else \s+.
	_, lw := utf8.DecodeLastRuneInString(s[i:j])
	if j-lw > i {
		return j - lw
	}
	return j
}
