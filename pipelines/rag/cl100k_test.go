package rag_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/pipelines/bpe/bpetest"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// tiktokenGo is tiktoken-go's own cl100k_base encoder, the reference.
func tiktokenGo(t testing.TB) *bpetest.Tiktoken {
	t.Helper()
	slow, err := bpetest.New("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	return slow
}

// TestCl100kCountsAsTiktoken compares Cl100k with tiktoken-go on random
// texts drawn from a mix of letters, digits, punctuation, contractions, white
// space of every kind and scripts beyond Latin, on texts of any runes, and on this
// repository's own Go and Markdown files.
func TestCl100kCountsAsTiktoken(t *testing.T) {
	slow := tiktokenGo(t)
	var fast rag.Cl100k
	check := func(text string) {
		t.Helper()
		if want, got := slow.Count(text), fast.Count(text); got != want {
			t.Fatalf("%q: Cl100k counts %d, tiktoken %d", text, got, want)
		}
	}
	for _, s := range []string{"", " ", "  ", "a", "\n", " \n ", "\r\n\r\n  x", "it's", "IT'S", "they'll've", "'S'", "'", "''ll", "1234567", "x  ", "  y",
		"a \t\n b", "héllo wörld", "数据 处理", "🙂🙂 ok", "\u00a0\u2003x", "{\"json\": [1, 2]}", "fn main() {\n\tprintln!(\"hi\");\n}", "Ⅻ ½ ²", "ſ'ſ"} {
		check(s)
	}
	atoms := []string{"a", "Z", "word", "The", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'", "'s", "'LL", "'re", "'d", "'x", "1", "12", "1234", "٣", "½", "Ⅳ",
		".", ",", "!?", "...", "-", "_", "(", ")", "{", "}", "\"", "é", "ß", "Σ", "日本", "мир", "🙂", "👍🏽", "\u00a0", "\u2028", "\u3000", "\u0301", "\u200d", "ǅ", "ſ", "K"}
	rng := rand.New(rand.NewPCG(3, 5))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		check(b.String())
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
		check(b.String())
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "actors", "*.go"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "*.md"))
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check(string(b))
	}
	// Invalid UTF-8: each invalid byte is read as U+FFFD, by both.
	check("a\xffb\xc3")
	check("\xe2\x82 it'\xffs \xed\xa0\x80\n\n")
}

// TestCl100kCountsLongPiecesAsTiktoken compares the counts of long pieces (past
// 256 bytes, merged with a heap) with tiktoken-go's: runs of one letter
// or one punctuation mark, random letters with no space, long numbers, runs of
// multi-byte letters, long words of the files' own bytes.
func TestCl100kCountsLongPiecesAsTiktoken(t *testing.T) {
	slow := tiktokenGo(t)
	var fast rag.Cl100k
	rng := rand.New(rand.NewPCG(7, 11))
	texts := []string{strings.Repeat("a", 257), strings.Repeat("a", 3001), strings.Repeat("<", 2500), strings.Repeat("=", 999),
		strings.Repeat("ab", 700), strings.Repeat("é", 900), strings.Repeat("日本", 400), strings.Repeat("xyz", 1000) + " end",
		" " + strings.Repeat("-", 1200) + "\n\n", strings.Repeat("Hello", 300)}
	for range 40 {
		var b strings.Builder
		letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		if rng.IntN(2) == 0 {
			letters = "<>=!?.,;:-_*&^%$#@~`|/+"
		}
		for range 257 + rng.IntN(3000) {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		if want, got := slow.Count(text), fast.Count(text); got != want {
			t.Fatalf("%.40q… (%d bytes): Cl100k counts %d, tiktoken %d", text, len(text), got, want)
		}
	}
}

// TestCl100kCountsAHugePiece counts a piece of 1 MiB, the most a task's input may
// be: with merges found by scanning, this took hours (64 KB took 6.7 s, and the
// cost grows with the square of the length).
func TestCl100kCountsAHugePiece(t *testing.T) {
	var c rag.Cl100k
	for _, run := range []string{"a", "<"} {
		// Eight of either make one token, the most the encoding has for such a run.
		if got, want := c.Count(strings.Repeat(run, 1<<20)), (1<<20)/8; got != want {
			t.Errorf("1 MiB of %q: %d tokens, want %d", run, got, want)
		}
	}
}

// hugeInvalid is 1 MiB of letters with one byte that is not UTF-8 in the
// middle, and its count. The byte reads as U+FFFD, which leads the second half's
// piece ([^\r\n\p{L}\p{N}]?\p{L}+), so the count is the first half's (eight
// letters a token), tiktoken-go's count of U+FFFD with the first eight letters
// after it, and the rest of the second half's; tiktoken-go counts the same text
// of 4 KiB so.
func hugeInvalid(t *testing.T) (string, int) {
	t.Helper()
	slow := tiktokenGo(t)
	text := func(half int) string { return strings.Repeat("a", half) + "\xff" + strings.Repeat("a", half) }
	count := func(half int) int { return half/8 + slow.Count("\xff"+strings.Repeat("a", 8)) + half/8 - 1 }
	if got, want := slow.Count(text(2048)), count(2048); got != want {
		t.Fatalf("tiktoken-go: %d tokens, want %d", got, want)
	}
	return text(1 << 19), count(1 << 19)
}

// TestCl100kCountsAHugeInvalidPiece counts a text of 1 MiB that is not valid
// UTF-8. Cl100k once gave such a text to tiktoken-go, whose merges take time
// that grows with the square of a piece's length (half an hour for this one).
func TestCl100kCountsAHugeInvalidPiece(t *testing.T) {
	text, want := hugeInvalid(t)
	var c rag.Cl100k
	if got := c.Count(text); got != want {
		t.Errorf("%d tokens, want %d", got, want)
	}
}

// TestTiktokenCounterCountsHugePieces counts 1 MiB of "a", and the same with a
// byte that is not UTF-8 in the middle, with a TiktokenCounter, which once
// counted with tiktoken-go (half an hour each).
func TestTiktokenCounterCountsHugePieces(t *testing.T) {
	text, want := hugeInvalid(t)
	var tk rag.TiktokenCounter
	if got, want := tk.Count(strings.Repeat("a", 1<<20)), (1<<20)/8; got != want {
		t.Errorf("1 MiB of %q: %d tokens, want %d", "a", got, want)
	}
	if got := tk.Count(text); got != want {
		t.Errorf("1 MiB, not UTF-8: %d tokens, want %d", got, want)
	}
}

func TestCl100kAllocatesNothing(t *testing.T) {
	var fast rag.Cl100k
	text := "What is 12 * (7 + 5)? It's 144 — see the calculator's answer:\n\n  {\"result\": 144}"
	fast.Count(text)
	if n := testing.AllocsPerRun(100, func() { fast.Count(text) }); n != 0 {
		t.Errorf("a count allocates %v times", n)
	}
}

func BenchmarkCountCl100k(b *testing.B) {
	var fast rag.Cl100k
	benchmarkCount(b, &fast)
}

// BenchmarkCountTiktoken is BenchmarkCountCl100k's baseline: tiktoken-go.
func BenchmarkCountTiktoken(b *testing.B) {
	benchmarkCount(b, tiktokenGo(b))
}

func benchmarkCount(b *testing.B, tok rag.Tokenizer) {
	text := strings.Repeat("The model calls a tool and reads its result: {\"page\": 12}. It's done.\n", 20)
	tok.Count(text)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Count(text)
	}
}
