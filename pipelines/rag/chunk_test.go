package rag

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// words counts whitespace-separated words: a tokenizer whose counts a test can
// work out by hand.
type words struct{}

func (words) Count(s string) int { return len(strings.Fields(s)) }

// byteCount counts bytes: never fewer than cl100k_base's tokens.
type byteCount struct{}

func (byteCount) Count(s string) int { return len(s) }

// sentence returns n words "wK" numbered from k, as a sentence.
func sentence(k, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", k+i)
	}
	return strings.Join(w, " ") + "."
}

// paragraphs splits a Markdown of paragraphs of the given word counts.
func paragraphs(sizes ...int) (string, []Paragraph) {
	var texts []string
	for i, n := range sizes {
		texts = append(texts, sentence(i*1000, n))
	}
	md := strings.Join(texts, "\n\n")
	return md, Split(md)
}

func TestChunkPacksWholeParagraphsWithOverlap(t *testing.T) {
	_, ps := paragraphs(10, 10, 10, 10, 10, 10, 3)
	// Budget 35: three paragraphs of 10 (estimate 32 with separators) fit, a
	// fourth does not. Overlap 12: one trailing paragraph (10) fits, two do not.
	got := Pack(ps, ChunkOptions{MaxTokens: 35, OverlapTokens: 12, Tokenizer: words{}})
	want := [][]int{{0, 1, 2}, {2, 3, 4}, {4, 5, 6}}
	if len(got) != len(want) {
		t.Fatalf("got %d chunks, want %d: %+v", len(got), len(want), got)
	}
	for i, idx := range want {
		var texts []string
		for _, k := range idx {
			texts = append(texts, ps[k].Text)
		}
		if w := strings.Join(texts, "\n\n"); got[i].Text != w {
			t.Errorf("chunk %d = %q\nwant %q", i, got[i].Text, w)
		}
		if got[i].Start != ps[idx[0]].Start || got[i].End != ps[idx[len(idx)-1]].End {
			t.Errorf("chunk %d offsets [%d,%d), want [%d,%d)", i, got[i].Start, got[i].End, ps[idx[0]].Start, ps[idx[len(idx)-1]].End)
		}
		if got[i].Tokens != (words{}).Count(got[i].Text) || got[i].Hash != textHash(got[i].Text) {
			t.Errorf("chunk %d: Tokens %d, Hash %s do not match its text", i, got[i].Tokens, got[i].Hash)
		}
	}
}

func TestChunkOverlapOptions(t *testing.T) {
	_, ps := paragraphs(4, 4, 4, 4, 4, 4)
	tests := []struct {
		name    string
		overlap int
		want    int // paragraphs each later chunk repeats
	}{
		{"none", -1, 0},
		{"one paragraph", 5, 1},
		{"two paragraphs", 9, 2},
		{"overlap as large as the budget leaves room for a new paragraph", 100, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := Pack(ps, ChunkOptions{MaxTokens: 14, OverlapTokens: tt.overlap, Tokenizer: words{}})
			for i := 1; i < len(cs); i++ {
				prev := strings.Split(cs[i-1].Text, "\n\n")
				cur := strings.Split(cs[i].Text, "\n\n")
				n := min(len(prev), len(cur))
				for n > 0 && strings.Join(prev[len(prev)-n:], "|") != strings.Join(cur[:n], "|") {
					n--
				}
				if n != tt.want {
					t.Errorf("chunk %d repeats %d trailing paragraphs of chunk %d, want %d:\n%q\n%q", i, n, i-1, tt.want, cs[i-1].Text, cs[i].Text)
				}
				if len(cur) == n {
					t.Errorf("chunk %d has no new paragraph", i)
				}
			}
		})
	}
}

func TestChunkCutsLongParagraphAtSentences(t *testing.T) {
	var sents []string
	for i := 0; i < 12; i++ {
		sents = append(sents, sentence(i*100, 7))
	}
	md := "# Long\n\n" + strings.Join(sents, " ") + "\n\nshort tail."
	ps := Split(md)
	cs := Pack(ps, ChunkOptions{MaxTokens: 20, OverlapTokens: -1, Tokenizer: words{}})
	var all []string
	for _, c := range cs {
		if c.Tokens > 20 {
			t.Errorf("chunk of %d tokens over the budget of 20: %q", c.Tokens, c.Text)
		}
		if !strings.HasSuffix(c.Text, ".") {
			t.Errorf("chunk does not end at a sentence end: %q", c.Text)
		}
		if strings.Join(c.HeadingPath, "") != "# Long" {
			t.Errorf("chunk heading path %q, want # Long", c.HeadingPath)
		}
		if c.Text != md[c.Start:c.End] {
			t.Errorf("chunk [%d,%d) does not slice back to its text %q", c.Start, c.End, c.Text)
		}
		all = append(all, c.Text)
	}
	if got, want := strings.Join(all, " "), strings.Join(sents, " ")+" short tail."; got != strings.Replace(want, ". short", ".\n\nshort", 1) && got != want {
		t.Errorf("chunks do not hold the text in order:\n%s\nwant\n%s", got, want)
	}
	if len(cs) < 5 {
		t.Errorf("got %d chunks, want at least 5 for 12 sentences of 8 words under 20", len(cs))
	}
}

func TestChunkCutsCodeAtLines(t *testing.T) {
	var lines []string
	for i := 0; i < 40; i++ {
		lines = append(lines, fmt.Sprintf("\tx%d := f(%d) // step", i, i))
	}
	md := "```go\n" + strings.Join(lines, "\n") + "\n```"
	cs := Pack(Split(md), ChunkOptions{MaxTokens: 30, OverlapTokens: -1, Tokenizer: &TiktokenCounter{}})
	if len(cs) < 2 {
		t.Fatalf("a code block over budget gave %d chunks", len(cs))
	}
	for _, c := range cs {
		for _, l := range strings.Split(c.Text, "\n") {
			if l != "```go" && l != "```" && !strings.HasPrefix(l, "\tx") {
				t.Errorf("chunk line %q is not a whole line of the code block (indentation kept)", l)
			}
		}
	}
}

func TestChunkBudgetNeverExceeded(t *testing.T) {
	tk := &TiktokenCounter{}
	if err := tk.Err(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := strings.Fields("the a retrieval chunk token budget overlap paragraph sentence heading Markdown 東京都 naïve émigré 42 3.14 (x) {y} https://example.com/path?q=1 ```")
	for trial := 0; trial < 40; trial++ {
		var b strings.Builder
		for p := 0; p < 1+rng.IntN(12); p++ {
			if rng.IntN(5) == 0 {
				fmt.Fprintf(&b, "%s %d\n\n", strings.Repeat("#", 1+rng.IntN(3)), p)
			}
			n := rng.IntN(400)
			for w := 0; w < n; w++ {
				b.WriteString(vocab[rng.IntN(len(vocab))])
				switch rng.IntN(12) {
				case 0:
					b.WriteString(". ")
				case 1:
					b.WriteString(strings.Repeat("z", rng.IntN(1500)) + " ")
				default:
					b.WriteString(" ")
				}
			}
			b.WriteString("\n\n")
		}
		md := b.String()
		maxTokens := 8 + rng.IntN(200)
		opts := ChunkOptions{MaxTokens: maxTokens, OverlapTokens: rng.IntN(maxTokens), Tokenizer: tk}
		ps := Split(md)
		cs := Pack(ps, opts)
		for i, c := range cs {
			if n := tk.Count(c.Text); n > maxTokens || n != c.Tokens {
				t.Fatalf("trial %d chunk %d: %d tokens (reported %d), budget %d", trial, i, n, c.Tokens, maxTokens)
			}
			if c.Start < 0 || c.End > len(md) || c.Start >= c.End {
				t.Fatalf("trial %d chunk %d: offsets [%d,%d) outside the Markdown", trial, i, c.Start, c.End)
			}
			if i > 0 && (c.Start < cs[i-1].Start || c.End <= cs[i-1].End) {
				t.Fatalf("trial %d chunk %d [%d,%d) does not move past chunk %d [%d,%d)", trial, i, c.Start, c.End, i-1, cs[i-1].Start, cs[i-1].End)
			}
		}
		// Without overlap, the chunks hold the paragraphs' text, in order; only
		// whitespace may differ.
		noOverlap := opts
		noOverlap.OverlapTokens = -1
		var want, got strings.Builder
		for _, p := range ps {
			want.WriteString(p.Text)
		}
		for _, c := range Pack(ps, noOverlap) {
			got.WriteString(c.Text)
		}
		if squeeze(got.String()) != squeeze(want.String()) {
			t.Fatalf("trial %d: the chunks without overlap do not hold the paragraphs' text", trial)
		}
		if again := Pack(ps, opts); fmt.Sprint(again) != fmt.Sprint(cs) {
			t.Fatalf("trial %d: Chunk is not deterministic", trial)
		}
	}
}

// squeeze drops all whitespace.
func squeeze(s string) string { return strings.Join(strings.Fields(s), "") }

func TestChunkTenMegabyteLine(t *testing.T) {
	if testing.Short() {
		t.Skip("counts 10 MB with the real tokenizer")
	}
	md := strings.Repeat("a", 10<<20)
	cs := Pack(Split(md), ChunkOptions{Tokenizer: &TiktokenCounter{}})
	total := 0
	for _, c := range cs {
		if c.Tokens > DefaultMaxTokens {
			t.Fatalf("chunk of %d tokens", c.Tokens)
		}
		total += len(strings.ReplaceAll(c.Text, " ", ""))
	}
	if total < len(md) {
		t.Errorf("chunks hold %d of the line's %d bytes", total, len(md))
	}
}

func TestTiktokenCounter(t *testing.T) {
	tk := &TiktokenCounter{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for text, want := range map[string]int{"hello world": 2, "tiktoken is great!": 6, "": 0, "<|endoftext|>": 7} {
				if got := tk.Count(text); got != want {
					t.Errorf("Count(%q) = %d, want %d", text, got, want)
				}
			}
		})
	}
	wg.Wait()
	if err := tk.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestDocumentHash(t *testing.T) {
	a, b := DocumentHash([]byte("v1")), DocumentHash([]byte("v2"))
	if a == b || a != DocumentHash([]byte("v1")) || len(a) != 64 {
		t.Errorf("DocumentHash: %q %q", a, b)
	}
}

func FuzzSplitChunk(f *testing.F) {
	for _, s := range []string{"# A\n\nx. y. z", "```\n# a\n\n", "T\n==\n| a |\n|---|\n", strings.Repeat("ab ", 100), "\xff\xfe. 東京。"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		ps := Split(md)
		checkOffsets(t, md, ps)
		for _, c := range Pack(ps, ChunkOptions{MaxTokens: 16, OverlapTokens: 5, Tokenizer: byteCount{}}) {
			if c.Tokens > 16 || c.Start < 0 || c.End > len(md) || c.Start > c.End {
				t.Fatalf("chunk %q: %d tokens, offsets [%d,%d) of %d", c.Text, c.Tokens, c.Start, c.End, len(md))
			}
		}
	})
}

func TestChunkKeepsLongURLOfAParagraphThatFits(t *testing.T) {
	url := "https://example.com/" + strings.Repeat("segment/", 40) + "?q=1"
	md := "See " + url + " for more."
	cs := Pack(Split(md), ChunkOptions{Tokenizer: &TiktokenCounter{}})
	if len(cs) != 1 || cs[0].Text != md {
		t.Errorf("a paragraph under budget with a %d-byte URL was cut: %+v", len(url), cs)
	}
}

// A chunk never spans a heading: its heading path is every paragraph's, so that a
// citation names the section a passage is from, and the overlap stays within the
// section.
func TestPackChunkNeverSpansAHeading(t *testing.T) {
	md := "# Operations\n\n## Backups\n\nStop the node and copy the directory.\n\nThe copy is a backup.\n\n" +
		"## Restore\n\nPut the copy back and start the node.\n\n### Check\n\nSearch for a known document.\n\n" +
		"## Restore\n\nA second section of the same name."
	chunks := Pack(Split(md), ChunkOptions{MaxTokens: 512, OverlapTokens: 64, Tokenizer: words{}})
	type got struct{ path, text string }
	want := []got{
		{"# Operations > ## Backups", "Stop the node and copy the directory.\n\nThe copy is a backup."},
		{"# Operations > ## Restore", "Put the copy back and start the node."},
		{"# Operations > ## Restore > ### Check", "Search for a known document."},
		{"# Operations > ## Restore", "A second section of the same name."},
	}
	if len(chunks) != len(want) {
		t.Fatalf("%d chunks, want %d: %+v", len(chunks), len(want), chunks)
	}
	for i, c := range chunks {
		if g := (got{strings.Join(c.HeadingPath, " > "), c.Text}); g != want[i] {
			t.Errorf("chunk %d: %+v, want %+v", i, g, want[i])
		}
		if md[c.Start:c.End] != c.Text {
			t.Errorf("chunk %d: offsets [%d,%d) hold %q", i, c.Start, c.End, md[c.Start:c.End])
		}
	}
	// Within one section the overlap still carries trailing paragraphs over.
	long := "# A\n\n" + sentence(0, 6) + "\n\n" + sentence(100, 6) + "\n\n" + sentence(200, 6)
	chunks = Pack(Split(long), ChunkOptions{MaxTokens: 13, OverlapTokens: 6, Tokenizer: words{}})
	if len(chunks) != 2 || !strings.HasPrefix(chunks[1].Text, sentence(100, 6)) {
		t.Errorf("overlap within a section: %+v", chunks)
	}
}

// With SpanHeadings a chunk holds paragraphs of several sections and is labelled
// by the headings they share.
func TestPackSpanHeadingsLabelsByTheSharedHeadings(t *testing.T) {
	md := "# Changelog\n\n## v1.1\n\nFixed a.\n\n## v1.0\n\nFixed b.\n\n# Other\n\nElse."
	chunks := Pack(Split(md), ChunkOptions{MaxTokens: 5, OverlapTokens: -1, Tokenizer: words{}, SpanHeadings: true})
	var got []string
	for _, c := range chunks {
		got = append(got, strings.Join(c.HeadingPath, " > ")+": "+c.Text)
	}
	want := []string{"# Changelog: Fixed a.\n\nFixed b.", "# Other: Else."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("chunks %q, want %q", got, want)
	}
	chunks = Pack(Split(md), ChunkOptions{MaxTokens: 10, OverlapTokens: -1, Tokenizer: words{}, SpanHeadings: true})
	if len(chunks) != 1 || len(chunks[0].HeadingPath) != 0 || chunks[0].Text != "Fixed a.\n\nFixed b.\n\nElse." {
		t.Errorf("one chunk under no shared heading: %+v", chunks)
	}
}
