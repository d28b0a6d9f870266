// Package cjk holds what the search tokenizers (memory search, search_tools and the
// notes search, load_skill's suggestions) share about scripts written without spaces
// between words.
package cjk

import (
	"strings"
	"unicode"
)

// Is reports whether r belongs to a script written without spaces between words (Han,
// Hiragana, Katakana) or usually searched by character bigrams (Hangul).
func Is(r rune) bool {
	return r >= 0x1100 && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// AppendPairs appends the search terms of one run of such characters to words: its
// overlapping character pairs ("東京都" → "東京", "京都"), or the character itself
// when the run has one, so that text without spaces is still searchable.
func AppendPairs(words []string, run []rune) []string {
	if len(run) == 1 {
		return append(words, string(run))
	}
	for i := 0; i+1 < len(run); i++ {
		words = append(words, string(run[i:i+2]))
	}
	return words
}

// ASCII returns the ASCII form of a fullwidth letter, digit or punctuation mark
// (U+FF01–FF5E, as an input method types them: "Ｗ" is "W"), and r itself otherwise.
func ASCII(r rune) rune {
	if 0xFF01 <= r && r <= 0xFF5E {
		return r - 0xFEE0
	}
	return r
}

// Narrow returns s with its fullwidth letters, digits and punctuation as ASCII
// (ASCII) and its ideographic spaces (U+3000, the space an input method types in
// its full-width mode) as spaces, so that "Ｋｅｎｊｉ　ｉＰｈｏｎｅ" reads as
// "Kenji iPhone"; s itself when it has none (HasFullwidth).
func Narrow(s string) string {
	if !HasFullwidth(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\u3000' {
			return ' '
		}
		return ASCII(r)
	}, s)
}

// HasFullwidth reports whether s holds a character Narrow changes: a fullwidth
// letter, digit or punctuation mark (U+FF01–FF5E) or an ideographic space (U+3000).
// It reads s's bytes without decoding it.
func HasFullwidth(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		switch s[i] {
		case 0xE3: // U+3000 is E3 80 80
			if s[i+1] == 0x80 && s[i+2] == 0x80 {
				return true
			}
		case 0xEF: // U+FF01–FF3F is EF BC 81–BF, U+FF40–FF5E EF BD 80–9E
			if s[i+1] == 0xBC && s[i+2] >= 0x81 || s[i+1] == 0xBD && s[i+2] <= 0x9E {
				return true
			}
		}
	}
	return false
}
