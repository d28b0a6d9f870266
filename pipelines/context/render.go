package context

import (
	"strings"

	"github.com/troupe-run/troupe/internal/tagquote"
	"github.com/troupe-run/troupe/messages"
)

// System returns the text of the system message: the Role & Policies items (the
// stable prefix, byte-identical from call to call while they do not change), then
// the stable State items (core memory, a paradigm's lessons), the non-empty ones
// joined by a blank line.
func (c *Context) System() string {
	parts, only := 0, ""
	for _, it := range c.Items {
		if it.Message == nil && placeOf(it) == placeSystem && it.Text != "" {
			parts, only = parts+1, it.Text
		}
	}
	if parts <= 1 {
		return only
	}
	var b strings.Builder
	for _, it := range c.Items {
		if it.Message != nil || placeOf(it) != placeSystem || it.Text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(it.Text)
	}
	return b.String()
}

// Messages renders the context as a chat request's messages, the stable part
// first so that a provider's prompt cache keeps hitting:
//
//  1. the system message (System), when it is not empty;
//  2. the items with a chat message (the conversation's turns, summaries, the
//     task's input), in Pos order;
//  3. when there are any, one user message with the other items: Task items
//     without a message, the State items that are not stable, Evidence and
//     Output, each section in a block of its tags ("<evidence>\n…\n</evidence>"),
//     in the sections' order.
//
// The sections keep their fixed order within each message; the conversation
// keeps its own.
func (c *Context) Messages() []messages.ChatMessage {
	n := 0
	for _, it := range c.Items {
		if it.Message != nil {
			n++
		}
	}
	sys, brief := c.System(), c.briefing()
	if sys != "" {
		n++
	}
	if brief != "" {
		n++
	}
	out := make([]messages.ChatMessage, 0, n) // a request's messages are kept while it is in flight: no room to spare
	if sys != "" {
		out = append(out, messages.ChatMessage{Role: messages.RoleSystem, Content: sys})
	}
	// Items are in section order, each section's by Pos: merge the sections'
	// messages by Pos, an earlier section first among equals.
	var next [numSections]int
	for i := range next {
		next[i] = c.nextMessage(Section(i), 0)
	}
	for {
		best := -1
		for sec, i := range next {
			if i >= 0 && (best < 0 || c.Items[i].Pos < c.Items[next[best]].Pos) {
				best = sec
			}
		}
		if best < 0 {
			break
		}
		i := next[best]
		out = append(out, *c.Items[i].Message)
		next[best] = c.nextMessage(Section(best), i+1)
	}
	if brief != "" {
		out = append(out, messages.ChatMessage{Role: messages.RoleUser, Content: brief})
	}
	return out
}

// nextMessage returns the index of the first item from i on of section sec that
// has a message, or -1.
func (c *Context) nextMessage(sec Section, i int) int {
	for ; i < len(c.Items) && c.Items[i].Section <= sec; i++ { // Items are in section order
		if c.Items[i].Section == sec && c.Items[i].Message != nil {
			return i
		}
	}
	return -1
}

// briefing renders the items that go after the conversation.
func (c *Context) briefing() string {
	var b strings.Builder
	section := Section(-1)
	for _, it := range c.Items {
		if it.Message != nil || placeOf(it) != placeBriefing {
			continue
		}
		if it.Section != section {
			if section >= 0 {
				_, closing := tags(section)
				b.WriteString(closing)
				b.WriteString("\n\n")
			}
			section = it.Section
			open, _ := tags(section)
			b.WriteString(open)
		} else {
			b.WriteString("\n\n")
		}
		b.WriteString(it.Text)
	}
	if section >= 0 {
		_, closing := tags(section)
		b.WriteString(closing)
	}
	return b.String()
}

// Text renders the context as one text, for a model without chat roles or a
// person reading it: each non-empty section under its name ("## Task"), in the
// fixed order, its items' text (a message as "role: content") joined by a blank
// line.
func (c *Context) Text() string {
	var b strings.Builder
	section := Section(-1)
	for _, it := range c.Items {
		text := it.Text
		if it.Message != nil {
			text = string(it.Message.Role) + ": " + it.Message.Content
			for _, call := range it.Message.ToolCalls {
				text += "\n[call " + call.Name + " " + call.Arguments + "]"
			}
		}
		if text == "" {
			continue
		}
		if it.Section != section {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			section = it.Section
			b.WriteString("## " + section.String() + "\n\n")
		} else {
			b.WriteString("\n\n")
		}
		b.WriteString(text)
	}
	return b.String()
}

// QuoteSectionTags returns text with "&lt;" for the "<" of every tag in it that
// names a section's block ("</state>", "<evidence>", "< /Task >": QuoteTags), so
// that an item's text, a memory or a passage that holds what someone wrote,
// cannot end the block it is rendered in (Messages' briefing) nor open another.
func QuoteSectionTags(text string) string { return QuoteTags(text, sectionTags[:]...) }

// QuoteTags returns text with "&lt;" for the "<" of every tag in it that opens or
// closes an element of one of names ("</lessons>", "< /Lessons >": any case, spaces
// and tabs around its "/", followed by a character a tag name cannot hold or by the
// end), so that text put in such an element cannot end it nor open another. Other
// text, "<" included, is returned as it is.
func QuoteTags(text string, names ...string) string {
	i := strings.IndexByte(text, '<')
	if i < 0 {
		return text
	}
	var b strings.Builder
	for ; i >= 0; i = strings.IndexByte(text, '<') {
		b.WriteString(text[:i])
		if namesTag(text[i+1:], names) {
			b.WriteString("&lt;")
		} else {
			b.WriteByte('<')
		}
		text = text[i+1:]
	}
	b.WriteString(text)
	return b.String()
}

// namesTag reports whether rest, the text after a "<", opens or closes an element
// of one of names.
func namesTag(rest string, names []string) bool {
	return tagquote.Names(rest, names, tagquote.NameByte)
}

// QuoteSectionLookalikeTags is QuoteSectionTags that also quotes a section's tag
// written with lookalikes of its characters (QuoteLookalikeTags): "＜/state＞",
// "</ｓｔａｔｅ>", "</st\u200bate>" read as "</state>" to a model.
func QuoteSectionLookalikeTags(text string) string {
	return QuoteLookalikeTags(text, sectionTags[:]...)
}

// QuoteLookalikeTags is QuoteTags that reads a tag as a model does: its "<" may
// be the full-width "＜" or the small "﹤"; its name, its "/" and the character
// after its name may be full-width ("ｓｔａｔｅ", "／", "＞"); a character that
// shows nothing (a zero-width space or joiner, a soft hyphen: Unicode's format
// characters) may stand anywhere in it; and any space but a line break may stand
// around its "/". The "<" or its lookalike of such a tag is written "&lt;"; other
// text, lookalikes included, is returned as it is.
func QuoteLookalikeTags(text string, names ...string) string {
	return tagquote.Lookalike(text, names, tagquote.NameByte)
}
