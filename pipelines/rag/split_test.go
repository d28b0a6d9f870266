package rag

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// para is a paragraph's heading path (joined with " > ") and text, for comparing.
type para struct{ path, text string }

func flat(ps []Paragraph) []para {
	out := make([]para, 0, len(ps))
	for _, p := range ps {
		out = append(out, para{strings.Join(p.HeadingPath, " > "), p.Text})
	}
	return out
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name, md string
		want     []para
	}{
		{"no headings", "one\ntwo\n\n\nthree", []para{{"", "one\ntwo"}, {"", "three"}}},
		{"heading path", "# A\n\nintro\n\n## B\n\nin b\n\n### C\nin c\n\n## D\n\nin d\n\n# E\n\nin e",
			[]para{{"# A", "intro"}, {"# A > ## B", "in b"}, {"# A > ## B > ### C", "in c"}, {"# A > ## D", "in d"}, {"# E", "in e"}}},
		{"skipped level then shallower", "### deep\n\nx\n\n## up\n\ny", []para{{"### deep", "x"}, {"## up", "y"}}},
		{"closing hashes and indent", "  ## Title ##\n\nx\n\n# C#\n\ny", []para{{"## Title", "x"}, {"# C#", "y"}}},
		{"not headings", "#hashtag\n\n    # indented code\n\n####### seven", []para{{"", "#hashtag"}, {"", "# indented code"}, {"", "####### seven"}}},
		{"setext", "Title\n=====\n\ntext\n\nSub\n---\n\nmore", []para{{"# Title", "text"}, {"# Title > ## Sub", "more"}}},
		{"list item then rule is not setext", "- item\n---", []para{{"", "- item\n---"}}},
		{"fence kept whole with blank lines and hashes", "# A\n\n```go\nx := 1\n\n# not a heading\n```\n\nafter",
			[]para{{"# A", "```go\nx := 1\n\n# not a heading\n```"}, {"# A", "after"}}},
		{"tilde fence needs its own closer", "~~~\n```\n\nstill code\n~~~\nout", []para{{"", "~~~\n```\n\nstill code\n~~~"}, {"", "out"}}},
		{"unclosed fence runs to the end", "```\ncode\n\nmore", []para{{"", "```\ncode\n\nmore"}}},
		{"table kept apart from text", "text before\n| a | b |\n| - | - |\n| 1 | 2 |\ntext after",
			[]para{{"", "text before"}, {"", "| a | b |\n| - | - |\n| 1 | 2 |"}, {"", "text after"}}},
		{"empty", "", []para{}},
		{"whitespace only", "  \n\n\t\n", []para{}},
		// A page of headings only is its headings, each under those above it.
		{"headings only", "# A\n## B\n", []para{{"", "# A"}, {"# A", "## B"}}},
		{"headings only, siblings and setext", "Guide\n=====\n\n## Install ##\n\n## Run\n\n#\n", []para{{"", "Guide"}, {"# Guide", "## Install ##"}, {"# Guide", "## Run"}}},
		{"headings then text: the text only", "# A\n## B\n\nbody\n\n## C\n", []para{{"# A > ## B", "body"}}},
		{"text then headings: the text only", "intro\n\n# A\n## B\n", []para{{"", "intro"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.md)
			if f := flat(got); !reflect.DeepEqual(f, tt.want) {
				t.Errorf("Split(%q) =\n%q\nwant\n%q", tt.md, f, tt.want)
			}
			checkOffsets(t, tt.md, got)
		})
	}
}

// checkOffsets fails unless every paragraph is the Markdown between its offsets,
// and paragraphs come in order without overlapping.
func checkOffsets(t *testing.T, md string, ps []Paragraph) {
	t.Helper()
	last := 0
	for _, p := range ps {
		if p.Start < last || p.End < p.Start || p.End > len(md) || md[p.Start:p.End] != p.Text {
			t.Fatalf("paragraph %q has offsets [%d,%d) that do not slice it out of the Markdown (previous end %d)", p.Text, p.Start, p.End, last)
		}
		last = p.End
	}
}

func TestSplitPathsDoNotAlias(t *testing.T) {
	ps := Split("# A\n\nx\n\n## B\n\ny\n\n## C\n\nz")
	ps[0].HeadingPath[0] = "changed"
	if ps[1].HeadingPath[0] != "# A" || ps[2].HeadingPath[1] != "## C" || ps[1].HeadingPath[1] != "## B" {
		t.Errorf("paragraphs share heading path storage: %q %q", ps[1].HeadingPath, ps[2].HeadingPath)
	}
}

func TestSplitTenMegabyteLine(t *testing.T) {
	md := "# Big\n\n" + strings.Repeat("a", 10<<20) + "\n"
	ps := Split(md)
	if len(ps) != 1 || len(ps[0].Text) != 10<<20 {
		t.Fatalf("Split of a 10 MB line gave %d paragraphs", len(ps))
	}
	checkOffsets(t, md, ps)
}

// A heading longer than MaxHeadingBytes is a paragraph: an ATX heading holding a
// page, or a long paragraph over a "---" line (meant as a rule, read as a setext
// heading), would be in the heading path of every chunk below it, a copy in each
// chunk of the event, uncounted by the chunk budget: an 8 MB Markdown file under
// a heading of 1.4 MB took 16 GB of memory to ingest, then failed.
func TestSplitTooLongAHeadingIsAParagraph(t *testing.T) {
	long := strings.Repeat("word ", MaxHeadingBytes/5+1)
	for name, md := range map[string]string{
		"atx":    "# Guide\n\n## " + long + "\n\nText under it.\n",
		"setext": "# Guide\n\n" + long + "\n---\n\nText under it.\n",
	} {
		paras := Split(md)
		if len(paras) != 2 {
			t.Fatalf("%s: %d paragraphs %+v; want the long heading's and the text", name, len(paras), paras)
		}
		for _, p := range paras {
			if !slices.Equal(p.HeadingPath, []string{"# Guide"}) {
				t.Errorf("%s: paragraph %.40q under %.80q; want it under # Guide", name, p.Text, p.HeadingPath)
			}
		}
		if !strings.Contains(paras[0].Text, strings.TrimSpace(long)) || paras[1].Text != "Text under it." {
			t.Errorf("%s: paragraphs %.60q and %q; want the long heading's text, then the text", name, paras[0].Text, paras[1].Text)
		}
	}
	edge := strings.Repeat("x", MaxHeadingBytes)
	if paras := Split("# " + edge + "\n\nText.\n"); len(paras) != 1 || !slices.Equal(paras[0].HeadingPath, []string{"# " + edge}) {
		t.Errorf("a heading of MaxHeadingBytes: %+v; want it a heading", paras)
	}
}
