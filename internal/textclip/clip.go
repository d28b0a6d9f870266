// Package textclip shortens a text sent back to a model (a reply that could not be
// parsed, a plan that was refused) to its head and tail, with a line between them
// saying how much was left out, or a text quoted in an error to its head, with
// "…" after it. Data enters as a string and its bounds (Middle, Head) and leaves
// as a string.
package textclip

import (
	"fmt"
	"unicode/utf8"
)

// Middle returns s when it has at most head+tail bytes, else its first head and
// last tail bytes, cut between characters, around a line "[… N bytes<of> left
// out …]" saying how many bytes were left out; of names what they were left out
// of (" of this reply"), or is empty.
func Middle(s string, head, tail int, of string) string {
	if len(s) <= head+tail {
		return s
	}
	h, t := head, len(s)-tail
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return fmt.Sprintf("%s\n[… %d bytes%s left out …]\n%s", s[:h], t-h, of, s[t:])
}

// Head returns s when it has at most n bytes, else its first n bytes or fewer,
// cut between characters, and "…" after them.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
