package context

import (
	"unicode"
	"unicode/utf8"
)

// A message that holds several items (the system message's stable parts, the
// briefing's sections) is their texts joined by blank lines and tags. cl100k_base
// is not additive across such joins: it splits a text into pieces by its pattern
// and counts each piece, and a piece can run across a join (".\n\n", a text
// ending in " \r\r\n" merging with the "\n\n" after it, "\n\n" with the white
// space a text starts with). So the builder counts such a message as it is sent
// (countJoined), from its parts' counts and the counts of the few bytes around
// each join, without counting the parts again.

// part is one text of a message made of several: an item's text with its count
// (tokens), or framing (a tag, a blank line) that countJoined counts itself
// (tokens < 0).
type part struct {
	text   string
	tokens int
}

// pieceBreak reports whether cl100k_base's pattern ends a piece between runes
// l and r, whatever comes before l and after r: after a letter or a digit before
// a rune that is neither (a run of letters, a contraction, and a run of digits
// end there, and no other piece holds a letter or a digit), and after a line
// break before a rune that is not white space (a run of white space, and a run of
// punctuation with the line breaks after it, end there). The pieces before such
// a break are the same in any text that holds l and r there, and those after it
// are those of the text from r on: counts are additive across it.
func pieceBreak(l, r rune) bool {
	if unicode.IsLetter(l) || unicode.IsNumber(l) {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}
	return (l == '\n' || l == '\r') && !unicode.IsSpace(r)
}

// firstBreak returns the first position in s, past its first rune and before
// its last, where a piece ends (pieceBreak), or -1.
func firstBreak(s string) int {
	l, w := utf8.DecodeRuneInString(s)
	for i := w; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if pieceBreak(l, r) {
			return i
		}
		l, i = r, i+w
	}
	return -1
}

// lastBreak returns the last position in s, past its first rune and before its
// last, where a piece ends (pieceBreak), or -1.
func lastBreak(s string) int {
	r, w := utf8.DecodeLastRuneInString(s)
	for i := len(s) - w; i > 0; {
		l, w := utf8.DecodeLastRuneInString(s[:i])
		if pieceBreak(l, r) {
			return i
		}
		r, i = l, i-w
	}
	return -1
}

// countJoined returns the cl100k_base tokens of the parts' texts concatenated,
// as Count counts the concatenation, each part with a count taken to count that
// (a caller's cached count stands). The part's count stands for its text up to
// its last piece break (pieceBreak) and from its first; the bytes between a
// part's last break and the next part's first (a join, framing and any part
// without a break among them) are counted together, unless a piece ends at the
// join itself. So a join costs the count of a few bytes around it, not a count
// of the parts again.
func (c *Cl100k) countJoined(parts []part, sc *joinScratch) int {
	n := 0
	// The windows still to count, back to back in buf: window i ends at ends[i],
	// the open one (the text since the last piece break) starts at start.
	buf, ends, start := sc.buf[:0], sc.ends[:0], 0
	prev := rune(-1) // the last rune of the text so far
	for i, p := range parts {
		if p.text == "" {
			continue
		}
		first, _ := utf8.DecodeRuneInString(p.text)
		if len(buf) > start && pieceBreak(prev, first) {
			ends, start = append(ends, len(buf)), len(buf)
		}
		prev, _ = utf8.DecodeLastRuneInString(p.text)
		h := -1
		if p.tokens >= 0 {
			h = firstBreak(p.text)
		}
		if h < 0 {
			if p.tokens >= 0 {
				n += p.tokens - c.Count(p.text)
			}
			buf = append(buf, p.text...)
			continue
		}
		n += p.tokens
		if len(buf) > start { // a piece runs across the join before: the head is counted with it
			buf = append(buf, p.text[:h]...)
			ends, start = append(ends, len(buf)), len(buf)
			n -= c.Count(p.text[:h])
		}
		if !breakAfter(parts[i+1:], prev) { // a piece may run across the join after: keep the tail
			t := lastBreak(p.text)
			n -= c.Count(p.text[t:])
			buf = append(buf, p.text[t:]...)
		}
	}
	if len(buf) > start {
		ends = append(ends, len(buf))
	}
	if len(ends) > 0 {
		text, from := string(buf), 0 // one string for all the windows
		for _, end := range ends {
			n += c.Count(text[from:end])
			from = end
		}
	}
	sc.buf, sc.ends = buf, ends
	return n
}

// joinScratch is countJoined's working memory: the windows' bytes and ends.
type joinScratch struct {
	buf  []byte
	ends []int
}

// breakAfter reports whether a piece ends after last, the last rune of a text
// that the parts follow: at the end, or before the next part's first rune.
func breakAfter(parts []part, last rune) bool {
	for _, p := range parts {
		if p.text != "" {
			r, _ := utf8.DecodeRuneInString(p.text)
			return pieceBreak(last, r)
		}
	}
	return true
}
