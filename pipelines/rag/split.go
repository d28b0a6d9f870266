package rag

import (
	"regexp"
	"slices"
	"strings"
)

// Paragraph is a block of Markdown with the headings it sits under.
type Paragraph struct {
	// HeadingPath is the chain of headings above the paragraph, outermost first,
	// each as "#"s, a space and its text: ["# Guide", "## Install"] (links
	// reduced to their text, permalinks dropped: headingTitle). Empty above the
	// first heading.
	HeadingPath []string
	// Text is the paragraph, without surrounding whitespace.
	Text string
	// Start and End are byte offsets into the Markdown: markdown[Start:End] == Text.
	Start, End int
}

// Split cuts Markdown into paragraphs. Blank lines separate paragraphs; a fenced
// code block (``` or ~~~) is one paragraph, blank lines and all, up to its closing
// fence or the end of the text; a table (lines starting with "|") is one paragraph
// and is not merged with the text around it. Headings, ATX ("## B") and setext (a
// line underlined with "=" or "-"), are not paragraphs: they set the HeadingPath of
// the paragraphs that follow, a heading of level n replacing those of level n and
// deeper; a heading whose title is over MaxHeadingBytes is a paragraph instead.
// Headings inside code blocks are code. A text of headings only (a table
// of contents, a page's outline) has its headings as its paragraphs instead, each
// its line as written under the headings above it, so that the page is not lost
// as empty; a text of whitespace only has no paragraph. Split runs in time linear
// in the length of the text and never fails.
func Split(markdown string) []Paragraph {
	s := splitter{md: markdown}
	for pos := 0; pos < len(markdown); {
		end := strings.IndexByte(markdown[pos:], '\n')
		next := len(markdown)
		if end < 0 {
			end = len(markdown)
		} else {
			end += pos
			next = end + 1
		}
		s.line(pos, end)
		pos = next
	}
	if s.fenceLen > 0 {
		s.emit(s.start, len(s.md))
	}
	s.flush()
	if len(s.out) == 0 {
		return s.heads
	}
	return s.out
}

// splitter is Split's state between lines.
type splitter struct {
	md     string
	out    []Paragraph
	path   []string
	levels []int
	// heads are the headings as paragraphs, what Split returns for a text
	// without any other; they are kept while out is empty only.
	heads []Paragraph

	// The open paragraph: its first line's start and its last line's end; open
	// is false when there is none. table is true when it is a table.
	open       bool
	start, end int
	table      bool
	lines      int

	// The open fenced code block: its fence character and length (0 when none).
	fenceChar byte
	fenceLen  int
}

// line handles the line md[start:end] (without its newline).
func (s *splitter) line(start, end int) {
	line := s.md[start:end]
	if s.fenceLen > 0 {
		if c, n, rest := fenceRun(line); c == s.fenceChar && n >= s.fenceLen && strings.TrimSpace(rest) == "" {
			s.emit(s.start, end)
			s.fenceLen = 0
		}
		return
	}
	if strings.TrimSpace(line) == "" {
		s.flush()
		return
	}
	if c, n, rest := fenceRun(line); n >= 3 && (c == '~' || !strings.ContainsRune(rest, '`')) {
		s.flush()
		s.fenceChar, s.fenceLen, s.start = c, n, start
		return
	}
	if level, title, ok := atxHeading(line); ok {
		s.flush()
		s.heading(level, title, start, end)
		return
	}
	if level := setextUnderline(line); level > 0 && s.open && !s.table && !startsLikeBlock(s.md[s.start:s.end]) {
		title := strings.Join(strings.Fields(s.md[s.start:s.end]), " ")
		s.open = false
		s.heading(level, title, s.start, s.end)
		return
	}
	isTable := strings.HasPrefix(strings.TrimLeft(line, " \t"), "|")
	if s.open && isTable != s.table {
		s.flush()
	}
	if !s.open {
		s.open, s.start, s.table, s.lines = true, start, isTable, 0
	}
	s.end = end
	s.lines++
}

// flush emits the open paragraph, if any.
func (s *splitter) flush() {
	if s.open {
		s.emit(s.start, s.end)
		s.open = false
	}
}

// emit appends md[start:end], trimmed of surrounding whitespace, as a paragraph
// under the current heading path.
func (s *splitter) emit(start, end int) {
	for start < end && isSpace(s.md[start]) {
		start++
	}
	for end > start && isSpace(s.md[end-1]) {
		end--
	}
	if start == end {
		return
	}
	s.out = append(s.out, Paragraph{
		HeadingPath: slices.Clone(s.path),
		Text:        s.md[start:end],
		Start:       start,
		End:         end,
	})
}

// headingText keeps md[start:end], a heading's text, trimmed, as a paragraph under
// the headings above it (the path without those the heading replaces), while the
// text has no other paragraph.
func (s *splitter) headingText(start, end int) {
	if len(s.out) > 0 {
		s.heads = nil
		return
	}
	for start < end && isSpace(s.md[start]) {
		start++
	}
	for end > start && isSpace(s.md[end-1]) {
		end--
	}
	if start < end {
		s.heads = append(s.heads, Paragraph{HeadingPath: slices.Clone(s.path), Text: s.md[start:end], Start: start, End: end})
	}
}

// heading makes a heading of the level the innermost of the path; md[start:end]
// is its text (headingText). The path holds its title's text (headingTitle). A
// title over MaxHeadingBytes makes no heading: md[start:end] is a paragraph.
func (s *splitter) heading(level int, title string, start, end int) {
	title = headingTitle(title)
	if len(title) > MaxHeadingBytes {
		// Every chunk below a heading carries its title, a copy in each chunk
		// of the event and outside the chunk budget: a heading of a megabyte
		// over thousands of chunks is gigabytes.
		s.emit(start, end)
		return
	}
	for len(s.levels) > 0 && s.levels[len(s.levels)-1] >= level {
		s.levels = s.levels[:len(s.levels)-1]
		s.path = s.path[:len(s.path)-1]
	}
	if title != "" {
		s.headingText(start, end)
	}
	entry := strings.Repeat("#", level)
	if title != "" {
		entry += " " + title
	}
	// A new slice, so the paths already handed out never change.
	s.path = append(slices.Clip(s.path), entry)
	s.levels = append(s.levels, level)
}

// inlineLink matches an inline link or image, "[text](destination "title")",
// its text as the submatch.
var inlineLink = regexp.MustCompile(`!?\[([^\[\]]*)\]\([^()]*\)`)

// headingTitle returns a heading's title as its text: links (and images) reduced
// to their text, and permalinks, links whose text is empty or a mark ("¶", "#",
// "§", "🔗": Sphinx's, GitHub's anchors), dropped. A documentation site links
// every heading; its links would be in every citation and, since the keyword
// index holds the heading path, their words ("Permalink to this heading") in
// every chunk.
func headingTitle(title string) string {
	if !strings.Contains(title, "](") {
		return title
	}
	t := inlineLink.ReplaceAllStringFunc(title, func(m string) string {
		text := strings.TrimSpace(inlineLink.FindStringSubmatch(m)[1])
		switch text {
		case "", "¶", "#", "§", "🔗":
			return ""
		}
		return text
	})
	return strings.Join(strings.Fields(t), " ")
}

// isSpace reports whether b is ASCII whitespace.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}

// indent strips up to three leading spaces, Markdown's allowance for block
// markers; ok is false when the line is indented further (or by a tab).
func indent(line string) (rest string, ok bool) {
	for i := 0; i < 4 && i < len(line); i++ {
		if line[i] != ' ' {
			return line[i:], line[i] != '\t'
		}
	}
	if len(line) < 4 {
		return "", true
	}
	return line, false
}

// fenceRun returns the fence character (` or ~) a line starts with, the length of
// its run and what follows it; n is 0 when the line does not start a fence.
func fenceRun(line string) (c byte, n int, rest string) {
	line, ok := indent(line)
	if !ok || line == "" || (line[0] != '`' && line[0] != '~') {
		return 0, 0, ""
	}
	c = line[0]
	for n < len(line) && line[n] == c {
		n++
	}
	if n < 3 {
		return 0, 0, ""
	}
	return c, n, line[n:]
}

// atxHeading parses "## Title ##" into its level and title.
func atxHeading(line string) (level int, title string, ok bool) {
	line, ok = indent(line)
	if !ok {
		return 0, "", false
	}
	for level < len(line) && line[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || (level < len(line) && line[level] != ' ' && line[level] != '\t') {
		return 0, "", false
	}
	title = strings.TrimSpace(line[level:])
	// A closing run of #s, preceded by a space (or the whole title), is dropped.
	if t := strings.TrimRight(title, "#"); t == "" || strings.HasSuffix(t, " ") || strings.HasSuffix(t, "\t") {
		title = strings.TrimSpace(t)
	}
	return level, title, true
}

// setextUnderline returns 1 for a line of "="s, 2 for a line of "-"s (trailing
// spaces allowed), 0 otherwise.
func setextUnderline(line string) int {
	line, ok := indent(line)
	line = strings.TrimRight(line, " \t")
	if !ok || line == "" {
		return 0
	}
	c := line[0]
	if c != '=' && c != '-' {
		return 0
	}
	if strings.Trim(line, string(c)) != "" {
		return 0
	}
	if c == '=' {
		return 1
	}
	return 2
}

// startsLikeBlock reports whether a paragraph starts with a list item or a block
// quote marker, which a "-" line under it does not turn into a heading.
func startsLikeBlock(text string) bool {
	t := strings.TrimLeft(text, " ")
	if t == "" {
		return false
	}
	switch t[0] {
	case '-', '*', '+', '>':
		return true
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	return i > 0 && i < len(t) && (t[i] == '.' || t[i] == ')')
}
