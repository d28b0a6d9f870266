package cjk

import (
	"strings"
	"unicode"
)

// Visible returns at most the first n characters of s as a reader sees them:
// full-width letters, digits and punctuation as ASCII (ASCII), the characters that
// show nothing (Unicode's format characters: a zero-width space or joiner, a soft
// hyphen) left out, and a space of any kind but a line break as " ". Only the
// characters kept count towards n, but at most 4n characters of s are read.
func Visible(s string, n int) string {
	var b strings.Builder
	kept, read := 0, 0
	for _, r := range s {
		if kept >= n || read >= 4*n {
			break
		}
		read++
		switch {
		case unicode.Is(unicode.Cf, r):
			continue
		case r != '\n' && r != '\r' && unicode.IsSpace(r):
			r = ' '
		default:
			r = ASCII(r)
		}
		b.WriteRune(r)
		kept++
	}
	return b.String()
}
