// Package tagquote writes "&lt;" for the "<" of the tags a text put inside a
// prompt's element must not write: a tag that would end that element or open
// another. The prompt's sections (pipelines/context) and an agent's core memory
// blocks (memory) quote their contents through it.
package tagquote

import (
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/cjk"
)

// Names reports whether rest, the text after a "<", opens or closes an element
// named by one of names: the name in any case, spaces and tabs around its "/",
// followed by the end of rest or by a byte nameByte says a name cannot hold.
func Names(rest string, names []string, nameByte func(byte) bool) bool {
	rest = strings.TrimLeft(strings.TrimPrefix(strings.TrimLeft(rest, " \t"), "/"), " \t")
	for _, name := range names {
		if len(rest) < len(name) || !strings.EqualFold(rest[:len(name)], name) {
			continue
		}
		if len(rest) == len(name) || !nameByte(rest[len(name)]) {
			return true
		}
	}
	return false
}

// Lookalike returns text with "&lt;" for the "<", or its lookalike, of every tag
// naming one of names (Names), a tag read as a model reads it: its "<" may be the
// full-width "＜" or the small "﹤"; its name, its "/" and the character after its
// name may be full-width ("ｓｔａｔｅ", "／", "＞"); a character that shows nothing
// (a zero-width space or joiner, a soft hyphen: Unicode's format characters) may
// stand anywhere in it (cjk.Visible); and any space but a line break may stand
// around its "/". Other text, lookalikes included, is returned as it is.
func Lookalike(text string, names []string, nameByte func(byte) bool) string {
	longest := 0
	for _, n := range names {
		longest = max(longest, len(n))
	}
	var b strings.Builder
	last := 0
	for i, r := range text {
		if r != '<' && r != '\uFF1C' && r != '\uFE64' {
			continue
		}
		after := i + utf8.RuneLen(r)
		if Names(cjk.Visible(text[after:], longest+maxPadding), names, nameByte) {
			b.WriteString(text[last:i])
			b.WriteString("&lt;")
			last = after
		}
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// Line is text on one line, its spaces joined, with "&lt;" for the "<" (or its
// lookalike) of every tag naming one of names (Lookalike, NameByte): the text of
// an element of a prompt's quoted data. The spaces are joined before the tags are
// quoted: a line break inside a tag ("<\n/turn>") would otherwise become one.
func Line(text string, names ...string) string {
	return Lookalike(strings.Join(strings.Fields(text), " "), names, NameByte)
}

// NameByte reports whether c may continue a tag's name: a letter or digit of
// ASCII, "_", "-", "." or ":". It is the nameByte of the prompts' own elements.
func NameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

// maxPadding bounds the characters Lookalike reads past a tag's name
// (cjk.Visible): its "/", the spaces around it and the character after the name.
const maxPadding = 24
