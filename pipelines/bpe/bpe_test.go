package bpe_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/pipelines/bpe"
	"github.com/troupe-run/troupe/pipelines/bpe/bpetest"
)

// pair is an encoding's Counter and tiktoken-go's encoder of it.
type pair struct {
	name string
	fast *bpe.Counter
	slow *bpetest.Tiktoken
}

func pairs(t testing.TB) []pair {
	t.Helper()
	var out []pair
	for _, name := range bpe.Encodings() {
		fast, err := bpe.New(name)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := bpetest.New(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pair{name, fast, slow})
	}
	return out
}

func (p pair) check(t *testing.T, text string) {
	t.Helper()
	if want, got := p.slow.Count(text), p.fast.Count(text); got != want {
		t.Fatalf("%s: %.80q… (%d bytes): Counter counts %d, tiktoken-go %d", p.name, text, len(text), got, want)
	}
}

// TestCountsAsTiktoken compares every encoding's counts with tiktoken-go's on
// random texts drawn from a mix of letters of every case, digits, punctuation,
// contractions, white space of every kind, marks and scripts beyond Latin; on
// texts of any runes; and on this repository's own Go and Markdown files.
func TestCountsAsTiktoken(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 150
	}
	for _, p := range pairs(t) {
		t.Run(p.name, func(t *testing.T) {
			for _, s := range []string{"", " ", "  ", "a", "\n", " \n ", "\r\n\r\n  x", "it's", "IT'S", "they'll've", "'S'", "'", "''ll", "1234567", "x  ", "  y",
				"a \t\n b", "héllo wörld", "数据 处理", "🙂🙂 ok", "\u00a0\u2003x", "{\"json\": [1, 2]}", "fn main() {\n\tprintln!(\"hi\");\n}", "Ⅻ ½ ²", "ſ'ſ",
				"HelloWorld", "ǅungla", "ªAAAA", "e\u0301te\u0301", "a/b//c\n/", "!\n/x", "CamelCase'S", "ABCdef'll", " 12 345", "<|endoftext|>"} {
				p.check(t, s)
			}
			atoms := []string{"a", "Z", "word", "The", "HTTPServer", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'", "'s", "'LL", "'re", "'d", "'x", "1", "12", "1234", "٣", "½", "Ⅳ",
				".", ",", "!?", "...", "-", "_", "/", "(", ")", "{", "}", "\"", "é", "ß", "Σ", "ǅ", "ª", "ʰ", "日本", "мир", "МИР", "🙂", "👍🏽", "\u00a0", "\u2028", "\u3000",
				"\u0301", "\u0903", "\u200d", "ſ", "K", "<|endoftext|>"}
			rng := rand.New(rand.NewPCG(3, 5))
			for range n {
				var b strings.Builder
				for range rng.IntN(30) {
					b.WriteString(atoms[rng.IntN(len(atoms))])
				}
				p.check(t, b.String())
			}
			// Any rune at all, control characters and every plane included.
			for range n {
				var b strings.Builder
				for range rng.IntN(25) {
					r := rune(rng.IntN(0x110000))
					switch rng.IntN(3) {
					case 0:
						r = rune(rng.IntN(128))
					case 1:
						r = rune(rng.IntN(0x3100))
					}
					if utf8.ValidRune(r) {
						b.WriteRune(r)
					}
				}
				p.check(t, b.String())
			}
			files, _ := filepath.Glob(filepath.Join("..", "..", "actors", "*.go"))
			more, _ := filepath.Glob(filepath.Join("..", "..", "*.md"))
			for _, f := range append(files, more...) {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				p.check(t, string(b))
			}
		})
	}
}

// TestCountsInvalidUTF8AsTiktoken compares the counts of texts that are not
// valid UTF-8 with tiktoken-go's, which reads each byte outside a valid
// sequence as U+FFFD: stray continuation bytes, cut sequences, surrogates,
// overlong forms, among letters, spaces and punctuation, and in long pieces.
func TestCountsInvalidUTF8AsTiktoken(t *testing.T) {
	atoms := []string{"\xff", "\x80", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "a", "word", " ", "\n", "'s", "é", "日本", "1", "!", "\uFFFD"}
	rng := rand.New(rand.NewPCG(13, 17))
	for _, p := range pairs(t) {
		t.Run(p.name, func(t *testing.T) {
			for _, s := range []string{"a\xffb\xc3", "\xff", "\xff\xff", " \xff", "it'\xffs", strings.Repeat("a", 300) + "\xff" + strings.Repeat("a", 300),
				strings.Repeat("\xe2\x82", 200), strings.Repeat("é\xc3", 150)} {
				p.check(t, s)
			}
			for range 500 {
				var b strings.Builder
				for range rng.IntN(30) {
					b.WriteString(atoms[rng.IntN(len(atoms))])
				}
				p.check(t, b.String())
			}
			for range 100 {
				b := make([]byte, rng.IntN(40))
				for i := range b {
					b[i] = byte(rng.IntN(256))
				}
				p.check(t, string(b))
			}
		})
	}
}

// TestCountsLongPiecesAsTiktoken compares the counts of long pieces (past 256
// bytes, merged with a heap) with tiktoken-go's, for every encoding: runs of
// one letter, of one punctuation mark, of spaces and of digits, random letters
// with no space, runs of multi-byte letters.
func TestCountsLongPiecesAsTiktoken(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	texts := []string{strings.Repeat("a", 257), strings.Repeat("a", 3001), strings.Repeat("<", 2500), strings.Repeat("=", 999),
		strings.Repeat("ab", 700), strings.Repeat("é", 900), strings.Repeat("日本", 400), strings.Repeat("xyz", 1000) + " end",
		" " + strings.Repeat("-", 1200) + "\n\n", strings.Repeat("Hello", 300), strings.Repeat("HELLO", 300), strings.Repeat(" ", 2000),
		strings.Repeat(" ", 1500) + "x", strings.Repeat("\n", 1200), strings.Repeat("7", 2000), strings.Repeat("/", 700) + "\n/\n",
		strings.Repeat("aб", 600)}
	for range 20 {
		var b strings.Builder
		letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		if rng.IntN(2) == 0 {
			letters = "<>=!?.,;:-_*&^%$#@~`|/+"
		}
		for range 257 + rng.IntN(2000) {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		texts = append(texts, b.String())
	}
	for _, p := range pairs(t) {
		t.Run(p.name, func(t *testing.T) {
			for _, text := range texts {
				p.check(t, text)
			}
		})
	}
}

// hostile gives the units of runs of about 1 MiB that tiktoken-go cannot count
// in reasonable time: each run is one piece, or a run of pieces that a
// backtracking pattern might scan from the start again and again.
func hostile() map[string]string {
	return map[string]string{
		"letters":      "a",
		"punctuation":  "<",
		"spaces":       " ",
		"newlines":     "\n",
		"digits":       strings.Repeat("7", 24),
		"contractions": "'s",
		"mixed":        "aб日",
		"camel":        "ªAAAAAAA",
		"marks":        "e\u0301",
	}
}

// TestCountsHugeRuns counts runs of about 1 MiB, the most a task's input may be,
// in every encoding: with tiktoken-go's merges, 64 KB of "a" took 6.7 s and the
// cost grows with the square of the length (half an hour for a megabyte). Each
// run is a part of about 1 KiB repeated 1024 times, and its count is checked
// against tiktoken-go's counts of one part and of two: the first part's tokens,
// then 1023 times what each part after it adds.
func TestCountsHugeRuns(t *testing.T) {
	for _, p := range pairs(t) {
		if p.name == "p50k_edit" {
			continue // p50k_base's ranks and pattern
		}
		for name, unit := range hostile() {
			part := strings.Repeat(unit, (1<<20)/1024/len(unit))
			one, two := p.slow.Count(part), p.slow.Count(part+part)
			if got, want := p.fast.Count(strings.Repeat(part, 1024)), one+1023*(two-one); got != want {
				t.Errorf("%s: 1 MiB of %s: %d tokens, want %d", p.name, name, got, want)
			}
		}
	}
}

func TestCountAllocatesNothing(t *testing.T) {
	text := "What is 12 * (7 + 5)? It's 144 — see the calculator's answer:\n\n  {\"result\": 144}"
	for _, name := range []string{"cl100k_base", "o200k_base", "r50k_base"} {
		c, err := bpe.New(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { c.Count(text) }); n != 0 {
			t.Errorf("%s: a count allocates %v times", name, n)
		}
	}
}

// BenchmarkCountLongPiece counts one unbroken piece of 64 KB with tiktoken-go and
// with a Counter: tiktoken-go's merges take time that grows with the square of
// the piece's length (a run takes seconds; try -benchtime 1x).
func BenchmarkCountLongPiece(b *testing.B) {
	text := strings.Repeat("a", 64<<10)
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		slow, err := bpetest.New(name)
		if err != nil {
			b.Fatal(err)
		}
		fast, err := bpe.New(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range []struct {
			name string
			tok  interface{ Count(string) int }
		}{{"tiktoken-go", slow}, {"Counter", fast}} {
			tok := impl.tok
			b.Run(name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					tok.Count(text)
				}
			})
		}
	}
}

// CountWithin answers whether a text's count is within a limit exactly as Count
// does, on texts of every kind and at every limit around the count, and stops
// early: past the limit it counts little more than the limit's worth of text.
func TestCountWithinAgreesWithCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	texts := []string{"", "a", " ", "it's  a\ttest\n\n", "数据 处理 🙂", "\xff\xfeabc", strings.Repeat("a", 5000),
		strings.Repeat("ab1 ", 3000), strings.Repeat("{\"k\": [1, 2]}\n", 500)}
	for range 40 {
		var b strings.Builder
		for range rng.IntN(400) {
			b.WriteString([]string{"word", " ", "\n", "123", "'s", "é", "🙂", "\t", "A", "x"}[rng.IntN(10)])
		}
		texts = append(texts, b.String())
	}
	for _, name := range bpe.Encodings() {
		c, err := bpe.New(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			n := c.Count(text)
			for _, limit := range []int{0, 1, n / 2, n - 1, n, n + 1, 2*n + 5} {
				got, ok := c.CountWithin(text, limit)
				if ok != (n <= limit) || (ok && got != n) || (!ok && got <= limit) {
					t.Fatalf("%s: %.40q… (count %d) within %d: %d, %v", name, text, n, limit, got, ok)
				}
			}
		}
	}
	// Past the limit it stops: a megabyte within 10 tokens counts a few pieces.
	c, _ := bpe.New("cl100k_base")
	if got, ok := c.CountWithin(strings.Repeat("word ", 200_000), 10); ok || got > 12 {
		t.Errorf("a megabyte within 10 tokens: %d, %v; want it to stop at 11", got, ok)
	}
	// A piece too long to fit is not counted: a megabyte of letters without a
	// space (one piece) within 4,000 tokens answers from the piece's length.
	run := strings.Repeat("a", 1<<20)
	if got, ok := c.CountWithin(run, 4000); ok || got >= c.Count(run) {
		t.Errorf("one piece of a megabyte within 4,000 tokens: %d, %v; want a bound past 4,000 below its count %d, not the count", got, ok, c.Count(run))
	}
}

// Long pieces at every limit around their count, with text before them: the
// bound CountWithin takes from a long piece's length never refuses a text within
// the limit.
func TestCountWithinAgreesWithCountOnLongPieces(t *testing.T) {
	for _, name := range bpe.Encodings() {
		c, err := bpe.New(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{strings.Repeat("a", 3000), "x y " + strings.Repeat("-", 5000), strings.Repeat(" ", 4000) + "z",
			strings.Repeat("ab", 700) + " " + strings.Repeat("Ü", 900), strings.Repeat("abcdefghijklmnopqrstuvwxyz", 200)} {
			n := c.Count(text)
			for _, limit := range []int{0, 1, n / 3, n - 1, n, n + 1} {
				got, ok := c.CountWithin(text, limit)
				if ok != (n <= limit) || (ok && got != n) || (!ok && got <= limit) {
					t.Fatalf("%s: %.40q… (count %d) within %d: %d, %v", name, text, n, limit, got, ok)
				}
			}
		}
	}
}

// BenchmarkCountWithinLongPiece is the builder's search for where to cut one
// unbroken piece of a megabyte (a task's input of letters without a space) to fit
// 4,000 tokens: CountWithin at each halving of the text.
func BenchmarkCountWithinLongPiece(b *testing.B) {
	c, _ := bpe.New("cl100k_base")
	text := strings.Repeat("a", 1<<20)
	for b.Loop() {
		for cut := len(text); cut > 0; cut /= 2 {
			c.CountWithin(text[:cut], 4000)
		}
	}
}
