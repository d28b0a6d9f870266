package rag

import (
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults of ChunkOptions.
const (
	// DefaultMaxTokens is a chunk's budget when ChunkOptions.MaxTokens is 0.
	DefaultMaxTokens = 512
	// DefaultOverlapTokens is the overlap budget when ChunkOptions.OverlapTokens
	// is 0, or a quarter of MaxTokens when that is less (a chunk of 64 tokens
	// overlaps by 16), so that the default leaves most of a chunk to new text.
	DefaultOverlapTokens = 64
	// MaxRunBytes bounds runs without whitespace (a base64 blob, a minified
	// line): a text holding a run longer than 4×MaxRunBytes is cut rather than
	// counted whole, and a run that has to be cut is cut into pieces of at most
	// MaxRunBytes bytes, joined by a space. The tokenizer's work grows with the
	// square of a run's length; this keeps it linear in the text's.
	MaxRunBytes = 256
)

// ChunkOptions say how Pack packs paragraphs.
type ChunkOptions struct {
	// MaxTokens is the most tokens a chunk holds; 0 means DefaultMaxTokens.
	MaxTokens int
	// OverlapTokens is the most tokens of trailing paragraphs of a chunk that the
	// next chunk starts with; 0 means DefaultOverlapTokens (a quarter of
	// MaxTokens when that is less), a negative value no overlap.
	OverlapTokens int
	// Tokenizer counts tokens; nil means a Cl100k (cl100k_base, the counts of a
	// TiktokenCounter without its allocations) shared by the calls that leave it nil.
	Tokenizer Tokenizer
	// SpanHeadings lets a chunk hold paragraphs of several sections, for a
	// document of sections too many and too small to make a chunk each (a
	// changelog, a glossary): a chunk's HeadingPath is then the headings its
	// paragraphs share (the longest common prefix of their paths), which is true of
	// every paragraph of it, if less precise. By default a heading starts a chunk.
	SpanHeadings bool
	// MaxChunks, when positive, stops Pack once it has made more than MaxChunks
	// chunks: it returns those MaxChunks+1, so a caller with a limit learns that
	// the text is over it without paying for the rest. 0 means no limit.
	MaxChunks int
}

// defaultTokenizer is the Cl100k of calls that give none. It is set once, lazily,
// and never changes after, so sharing it keeps Pack deterministic.
var defaultTokenizer = &Cl100k{}

// Chunk is a run of whole paragraphs (or pieces of one long paragraph) to embed and
// store.
type Chunk struct {
	// Text is the chunk's paragraphs, separated by a blank line; pieces of one
	// paragraph are separated by a space, or a newline where the paragraph had one.
	Text string
	// HeadingPath is the heading path of every paragraph of the chunk: a chunk
	// never spans a heading (unless ChunkOptions.SpanHeadings), so that its
	// citation names the section its text is from.
	HeadingPath []string
	// Start and End are the byte offsets in the Markdown of the start of the first
	// paragraph and the end of the last. A chunk that starts inside a table
	// starts with the table's header row and separator, one inside a fenced code
	// block with its opening fence, which are not at Start (nor the closing
	// fence of a chunk that ends inside a block at End).
	Start, End int
	// Tokens is the Tokenizer's count of Text, at most MaxTokens (unless a single
	// character counts more than MaxTokens tokens).
	Tokens int
	// Hash is the hex SHA-256 of Text.
	Hash string
}

// unit is what Pack packs: a whole paragraph, or a piece of one too long for a
// chunk.
type unit struct {
	text       string
	start, end int
	path       []string
	tokens     int
	para       int    // index of the paragraph it comes from
	sep        string // what joins it to the unit before it, if from the same paragraph
	// head is, for a piece of a table below its header, the table's header row
	// and separator, and for a piece of a fenced code block below its opening
	// fence, that fence's line: a chunk that starts with the piece starts with it
	// (rows under no column names say little, and code out of its fence reads as
	// prose). tail is, for a piece of a fenced code block above its closing
	// fence, the fence that closes it: a chunk that ends with the piece ends with
	// it. headTokens and tailTokens are their counts.
	head, tail             string
	headTokens, tailTokens int
}

// Pack packs paragraphs, in order, into chunks of at most opts.MaxTokens tokens.
// A chunk holds whole paragraphs of one section (one heading path: a heading
// starts a new chunk, unless opts.SpanHeadings); each chunk after the first starts
// with whole trailing paragraphs of the chunk before in its section, as many as fit in
// opts.OverlapTokens (and leave room for at least one new paragraph), and holds at
// least one paragraph the chunk before did not.
//
// A paragraph longer than MaxTokens is cut into pieces that are then packed like
// paragraphs: at sentence ends (at line ends for a fenced code block or a table),
// then, for a sentence still too long, at whitespace, and last, for a run without
// whitespace, every MaxRunBytes bytes (fewer under a small budget) at a character
// boundary. A chunk that starts inside a table (below its header) starts with the
// table's header row and separator, so that its rows keep their column names; one
// of a fenced code block starts with its opening fence and ends with a closing
// one, so that it is a fenced block of its own (unless they are over a quarter of
// the budget). The same paragraphs and options always give the same chunks.
func Pack(paras []Paragraph, opts ChunkOptions) []Chunk {
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	overlap := opts.OverlapTokens
	switch {
	case overlap == 0:
		overlap = min(DefaultOverlapTokens, maxTokens/4)
	case overlap < 0:
		overlap = 0
	}
	tk := opts.Tokenizer
	if tk == nil {
		tk = defaultTokenizer
	}
	c := chunker{tk: tk, max: maxTokens, span: opts.SpanHeadings}
	next, stop := iter.Pull(c.all(paras))
	defer stop()
	return c.pack(&unitWindow{next: next}, overlap, opts.MaxChunks)
}

// unitWindow holds the units pack still needs, pulled one at a time from the
// paragraphs as pack asks for them: a document's units (a 32 MB paragraph of
// one-token sentences is 16 million) are never all held at once.
type unitWindow struct {
	next  func() (unit, bool)
	units []unit // units[k] is unit base+k
	base  int
}

// get returns the unit at index i (at or after base), pulling units up to it;
// ok is false past the last unit.
func (w *unitWindow) get(i int) (u unit, ok bool) {
	for i-w.base >= len(w.units) {
		u, ok := w.next()
		if !ok {
			return unit{}, false
		}
		w.units = append(w.units, u)
	}
	return w.units[i-w.base], true
}

// at returns the unit at index i, pulled already.
func (w *unitWindow) at(i int) unit { return w.units[i-w.base] }

// drop forgets the units before index i.
func (w *unitWindow) drop(i int) {
	if k := i - w.base; k > 0 {
		n := copy(w.units, w.units[k:])
		clear(w.units[n:])
		w.units = w.units[:n]
		w.base = i
	}
}

// chunker holds what Pack's steps share.
type chunker struct {
	tk   Tokenizer
	max  int
	span bool // ChunkOptions.SpanHeadings
}

// sameSection reports whether units of heading paths a and b may share a chunk.
func (c *chunker) sameSection(a, b []string) bool { return c.span || slices.Equal(a, b) }

// all yields the units of the paragraphs in order.
func (c *chunker) all(paras []Paragraph) iter.Seq[unit] {
	return func(yield func(unit) bool) {
		for i, p := range paras {
			if !c.units(i, p, yield) {
				return
			}
		}
	}
}

// units yields paragraph p as one unit, or as pieces when it is longer than a
// chunk; it returns false as soon as yield does.
func (c *chunker) units(i int, p Paragraph, yield func(unit) bool) bool {
	if countable(p.Text, c.max) {
		if n := c.tk.Count(p.Text); n <= c.max {
			return yield(unit{text: p.Text, start: p.Start, end: p.End, path: p.HeadingPath, tokens: n, para: i})
		}
	}
	code := strings.HasPrefix(p.Text, "```") || strings.HasPrefix(p.Text, "~~~") || strings.HasPrefix(p.Text, "|")
	level := levelSentences
	if code {
		level = levelLines
	}
	prevEnd := -1 // end of the piece before, relative to p.Text
	head, headTokens, tail, tailTokens, closeAt := "", 0, "", 0, len(p.Text)
	switch {
	case strings.HasPrefix(p.Text, "|"):
		head, headTokens = c.tableHead(p.Text)
	case code:
		head, tail, closeAt = fences(p.Text)
		if head != "" {
			headTokens, tailTokens = c.tk.Count(head), c.tk.Count(tail)
			if 4*(headTokens+tailTokens) > c.max {
				head, tail = "", ""
			}
		}
	}
	return c.cut(p.Text, 0, level, func(s, e int) bool {
		u := unit{text: p.Text[s:e], start: p.Start + s, end: p.Start + e, path: p.HeadingPath, para: i}
		u.tokens = c.tk.Count(u.text)
		if head != "" && s > len(head) && headTokens+1+u.tokens+tailTokens+1 <= c.max {
			u.head, u.headTokens = head, headTokens
		}
		if tail != "" && e < closeAt && headTokens+1+u.tokens+tailTokens+1 <= c.max {
			u.tail, u.tailTokens = tail, tailTokens
		}
		if prevEnd >= 0 {
			u.sep = " "
			if strings.Contains(p.Text[prevEnd:s], "\n") {
				u.sep = "\n"
			}
		}
		prevEnd = e
		return yield(u)
	})
}

// tableHead returns the header of a Markdown table, its first row and the
// separator row below it ("| --- | :-: |"), and their token count; "" when the
// table has none, one whose cells are all empty (an HTML table without <th>
// converts to one: it names no column, and repeated it would only cost tokens),
// or one of more than a quarter of a chunk's budget (repeated in every chunk of
// the table, it would crowd the rows out).
func (c *chunker) tableHead(table string) (string, int) {
	first, rest, ok := strings.Cut(table, "\n")
	if !ok || strings.Trim(first, "| \t") == "" {
		return "", 0
	}
	sep, _, _ := strings.Cut(rest, "\n")
	if t := strings.TrimSpace(sep); !strings.Contains(t, "-") || strings.Trim(t, "|-: \t") != "" {
		return "", 0
	}
	head := first + "\n" + sep
	if !countable(head, c.max) {
		return "", 0
	}
	if n := c.tk.Count(head); 4*n <= c.max {
		return head, n
	}
	return "", 0
}

// fences returns the opening line of a fenced code block (its fence and info
// string: "```go"), the fence that closes it, and the offset of its closing line
// (len(block) when the block runs to the end of the text unclosed); "" when the
// opening line is over MaxRunBytes.
func fences(block string) (open, close string, closeAt int) {
	open, _, _ = strings.Cut(block, "\n")
	ch, n, _ := fenceRun(open)
	if n == 0 || len(open) > MaxRunBytes {
		return "", "", len(block)
	}
	close = strings.Repeat(string(ch), n)
	closeAt = len(block)
	if i := strings.LastIndexByte(block, '\n'); i >= 0 {
		if c, m, rest := fenceRun(block[i+1:]); c == ch && m >= n && strings.TrimSpace(rest) == "" {
			closeAt = i + 1
		}
	}
	return open, close, closeAt
}

// Levels at which cut cuts a text.
const (
	levelLines = iota
	levelSentences
	levelWords
	levelRuns
)

// cut calls piece with the offsets (relative to base's text) of the pieces of
// text, each of at most c.max tokens: the text's segments at the level, and the
// segments too long cut again at the next level. It stops and returns false as
// soon as piece returns false.
func (c *chunker) cut(text string, base, level int, piece func(start, end int) bool) bool {
	// Cut to at most max bytes, a run is at most max cl100k_base tokens (a byte
	// never takes more than one); four bytes hold any character.
	runBytes := min(MaxRunBytes, max(c.max, utf8.UTFMax))
	for _, sg := range segments(text, level, runBytes) {
		s, e := sg[0], sg[1]
		seg := text[s:e]
		if level == levelRuns || (countable(seg, c.max) && c.tk.Count(seg) <= c.max) {
			if !piece(base+s, base+e) {
				return false
			}
			continue
		}
		next := level + 1
		if level == levelLines {
			next = levelWords
		}
		if !c.cut(seg, base+s, next, piece) {
			return false
		}
	}
	return true
}

// countable reports whether a text is short enough to be worth counting for a
// budget of max tokens, and has no run (of whitespace or not) longer than
// 4×MaxRunBytes, which would make counting slow.
func countable(text string, max int) bool {
	if len(text) > 16*max+4*MaxRunBytes {
		return false
	}
	run, space := 0, false
	for i := 0; i < len(text); i++ {
		sp := isSpace(text[i])
		if sp != space {
			run, space = 0, sp
		}
		run++
		if run > 4*MaxRunBytes {
			return false
		}
	}
	return true
}

// segments returns the [start, end) offsets of the non-empty segments of text at a
// level: lines (leading indentation kept), sentences, words, or pieces of at most
// runBytes bytes ending at a character boundary.
func segments(text string, level, runBytes int) [][2]int {
	var out [][2]int
	add := func(s, e int) {
		if level != levelLines {
			for s < e && isSpace(text[s]) {
				s++
			}
		}
		for e > s && isSpace(text[e-1]) {
			e--
		}
		if s < e {
			out = append(out, [2]int{s, e})
		}
	}
	switch level {
	case levelLines:
		s := 0
		for i := 0; i < len(text); i++ {
			if text[i] == '\n' {
				add(s, i)
				s = i + 1
			}
		}
		add(s, len(text))
	case levelSentences:
		s := 0
		for i := 0; i < len(text); {
			r, size := utf8.DecodeRuneInString(text[i:])
			i += size
			if !isSentenceEnd(r) {
				continue
			}
			for i < len(text) {
				r2, size2 := utf8.DecodeRuneInString(text[i:])
				if !strings.ContainsRune(`"')]}’”»`, r2) {
					break
				}
				i += size2
			}
			r2, _ := utf8.DecodeRuneInString(text[i:])
			if i == len(text) || unicode.IsSpace(r2) || isCJKSentenceEnd(r) {
				add(s, i)
				s = i
			}
		}
		add(s, len(text))
	case levelWords:
		s := -1
		for i := 0; i < len(text); i++ {
			if isSpace(text[i]) {
				if s >= 0 {
					add(s, i)
					s = -1
				}
			} else if s < 0 {
				s = i
			}
		}
		if s >= 0 {
			add(s, len(text))
		}
	case levelRuns:
		for s := 0; s < len(text); {
			e := min(len(text), s+runBytes)
			for e < len(text) && e > s+1 && !utf8.RuneStart(text[e]) {
				e--
			}
			add(s, e)
			s = e
		}
	}
	return out
}

// isSentenceEnd reports whether r ends a sentence when followed by a space.
func isSentenceEnd(r rune) bool {
	return r == '.' || r == '!' || r == '?' || r == '…' || isCJKSentenceEnd(r)
}

// isCJKSentenceEnd reports whether r ends a sentence without a space after it.
func isCJKSentenceEnd(r rune) bool {
	return r == '。' || r == '！' || r == '？'
}

// pack groups units into chunks under the budget, with the overlap, and stops
// after maxChunks+1 chunks when maxChunks is positive.
func (c *chunker) pack(w *unitWindow, overlap, maxChunks int) []Chunk {
	var (
		out  []Chunk
		prev []int // indices of the units of the chunk before
	)
	for i := 0; ; {
		if _, ok := w.get(i); !ok || (maxChunks > 0 && len(out) > maxChunks) {
			break
		}
		// The overlap: whole trailing units of the chunk before, within budget,
		// of the section of the first new unit (a chunk never spans a heading).
		section := w.at(i).path
		var cur []int
		est := 0
		for k := len(prev) - 1; k >= 0; k-- {
			add := w.at(prev[k]).tokens + boolInt(len(cur) > 0)
			if est+add > overlap || !c.sameSection(w.at(prev[k]).path, section) {
				break
			}
			cur = append([]int{prev[k]}, cur...)
			est += add
		}
		ov := len(cur)
		// headCost is what the head of the unit the chunk starts with and the
		// tail of last, the unit it would end with, add (join).
		headCost := func(last int) int {
			first, n := last, 0
			if len(cur) > 0 {
				first = cur[0]
			}
			if h := w.at(first).headTokens; h > 0 {
				n += h + 1
			}
			if t := w.at(last).tailTokens; t > 0 {
				n += t + 1
			}
			return n
		}
		// New units while they fit; the first always goes in, pushing out
		// overlap that leaves it no room.
		j := i
		for {
			u, ok := w.get(j)
			if !ok || !c.sameSection(u.path, section) {
				break
			}
			add := u.tokens + boolInt(len(cur) > 0)
			if est+add+headCost(j) > c.max {
				if j > i {
					break
				}
				for ov > 0 && est+add+headCost(j) > c.max {
					est -= w.at(cur[0]).tokens + boolInt(len(cur) > 1)
					cur, ov = cur[1:], ov-1
					add = u.tokens + boolInt(len(cur) > 0)
				}
			}
			cur = append(cur, j)
			est += add
			j++
		}
		// The estimate adds up separate counts; the real count of the joined text
		// decides. Overlap goes first, then new units from the end.
		text := c.join(w, cur)
		n := c.tk.Count(text)
		for n > c.max && len(cur) > 1 {
			if ov > 0 {
				cur, ov = cur[1:], ov-1
			} else {
				cur = cur[:len(cur)-1]
				j--
			}
			text = c.join(w, cur)
			n = c.tk.Count(text)
		}
		first, last := w.at(cur[0]), w.at(cur[len(cur)-1])
		path := first.path
		for _, x := range cur[1:] {
			path = commonPrefix(path, w.at(x).path)
		}
		out = append(out, Chunk{
			Text:        text,
			HeadingPath: slices.Clone(path),
			Start:       first.start,
			End:         last.end,
			Tokens:      n,
			Hash:        textHash(text),
		})
		prev, i = cur, j
		// The next chunk starts at unit i or in its overlap, within prev.
		w.drop(min(prev[0], i))
	}
	return out
}

// commonPrefix returns the headings heading paths a and b start with both.
func commonPrefix(a, b []string) []string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

// join joins the units at the indices into a chunk's text, after the head of the
// first (the header of the table, or the fence of the code block, it continues)
// and before the tail of the last (the fence closing its code block).
func (c *chunker) join(w *unitWindow, idx []int) string {
	var b strings.Builder
	if head := w.at(idx[0]).head; head != "" {
		b.WriteString(head)
		b.WriteString("\n")
	}
	for k, x := range idx {
		if k > 0 {
			if u := w.at(x); u.para == w.at(idx[k-1]).para && u.sep != "" {
				b.WriteString(u.sep)
			} else {
				b.WriteString("\n\n")
			}
		}
		b.WriteString(w.at(x).text)
	}
	if tail := w.at(idx[len(idx)-1]).tail; tail != "" {
		b.WriteString("\n")
		b.WriteString(tail)
	}
	return b.String()
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
