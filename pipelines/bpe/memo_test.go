package bpe

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// longPieces returns pieces to derive counts from: runs of one letter, random
// letters of a small alphabet (many ties and overlapping pairs), of the whole
// lowercase alphabet, of mixed case, of CJK, of emoji and punctuation, of
// spaces, of digits, each about n bytes.
func longPieces(rng *rand.Rand, n int) []string {
	pick := func(atoms ...string) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		return b.String()
	}
	letters := func(alphabet string) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	return []string{
		strings.Repeat("a", n),
		letters("ab"), letters("abc"), letters("aeiou"), letters("abcdefghijklmnopqrstuvwxyz"),
		letters("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
		pick("数", "据", "处", "理", "日", "本"), pick("🙂", "👍🏽", "!", "?", "-", "—", "="),
		pick("é", "e", "\u0301", "ß", "s"), strings.Repeat(" ", n), letters("0123456789"),
		pick("ab", "ba", "aab", "the", "ing", "tion"),
	}
}

// checkDerived holds the counts the memo derives for prefixes and suffixes of p
// to merging them whole, at each length in ls.
func checkDerived(t *testing.T, name string, tb *table, p string, ls []int) (derived int) {
	t.Helper()
	e := merged{p, tb.mergeStarts(p)}
	for _, l := range ls {
		if l <= 0 || l > len(p) {
			continue
		}
		if n, ok := e.prefix(tb, l); ok {
			derived++
			if want := len(tb.mergeStarts(p[:l])); n != want {
				t.Fatalf("%s: %.30q… (%d bytes): prefix of %d bytes derived as %d tokens, merged %d", name, p, len(p), l, n, want)
			}
		}
		if m := len(p) - l; m > 0 {
			if n, ok := e.suffix(tb, m); ok {
				derived++
				if want := len(tb.mergeStarts(p[m:])); n != want {
					t.Fatalf("%s: %.30q… (%d bytes): suffix from %d derived as %d tokens, merged %d", name, p, len(p), m, n, want)
				}
			}
		}
	}
	return derived
}

// TestMemoCountsAsMerging holds the counts pieceMemo derives to merging each
// prefix and suffix whole: at every length of pieces of 600 bytes, and at
// random lengths and around token starts of pieces of 12,000, for every encoding.
func TestMemoCountsAsMerging(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 23))
	for _, name := range Encodings() {
		c, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		tb := &c.t
		derived := 0
		for _, p := range longPieces(rng, 600) {
			all := make([]int, len(p))
			for i := range all {
				all[i] = i + 1
			}
			derived += checkDerived(t, name, tb, p, all)
		}
		n := 12000
		if testing.Short() {
			n = 6000
		}
		for _, p := range longPieces(rng, n) {
			var ls []int
			for range 12 {
				ls = append(ls, 1+rng.IntN(len(p)))
			}
			// Around token starts: where a cut meets a token's edge.
			for _, st := range tb.mergeStarts(p[:n/2])[len(tb.mergeStarts(p[:n/2]))/2:][:3] {
				ls = append(ls, int(st)-1, int(st), int(st)+1, len(p)-int(st))
			}
			derived += checkDerived(t, name, tb, p, ls)
		}
		if derived == 0 {
			t.Fatalf("%s: no count derived", name)
		}
	}
}

// countMerged is Count as it was before pieceMemo: every piece merged whole.
func countMerged(c *Counter, text string) int {
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	n := 0
	for i := 0; i < len(text); {
		j := c.t.next(text, i)
		n += c.t.pieceTokens(text[i:j])
		i = j
	}
	return n
}

// A Counter that keeps long pieces' merges counts texts, their prefixes and their
// suffixes (at rune boundaries, as a search for a cut takes them, and one text
// with a rune cut in two) as merging every
// piece whole counts them, whichever texts it kept, and CountWithin agrees.
func TestCounterWithMemoCountsAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 31))
	for _, name := range Encodings() {
		c, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range longPieces(rng, 12000) {
			for _, text := range []string{p, "It says: " + p + "\n\nThe end.", p + " " + p[:5000]} {
				if got, want := c.Count(text), countMerged(c, text); got != want {
					t.Fatalf("%s: %.30q… counts %d, merged whole %d", name, text, got, want)
				}
				for range 6 {
					cut := rng.IntN(len(text) + 1)
					for cut > 0 && cut < len(text) && text[cut]&0xC0 == 0x80 {
						cut--
					}
					for _, s := range []string{text[:cut], text[cut:]} {
						want := countMerged(c, s)
						if got := c.Count(s); got != want {
							t.Fatalf("%s: %.30q… (%d bytes) counts %d, merged whole %d", name, s, len(s), got, want)
						}
						for _, limit := range []int{want - 1, want, want + 1} {
							if got, ok := c.CountWithin(s, limit); ok != (want <= limit) || ok && got != want {
								t.Fatalf("%s: %.30q… (count %d) within %d: %d, %v", name, s, want, limit, got, ok)
							}
						}
					}
				}
			}
		}
	}
}

// mergeLong, which merges a long piece in chunks joined where their tokens meet,
// finds the tokens merging it whole finds, for every encoding, on pieces of every
// kind and of lengths around a chunk's multiples.
func TestMergeLongAsMergingWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 41))
	for _, name := range Encodings() {
		c, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{2*chunk + 1, 3*chunk - 1, 5*chunk + 77} {
			for _, p := range longPieces(rng, n) {
				got, want := c.t.mergeLong(p), c.t.mergeStarts(p)
				if small := c.t.mergeInChunks(p[:3000], 40); !slices.Equal(small, c.t.mergeStarts(p[:3000])) {
					t.Fatalf("%s: %.30q… (3000 bytes) merged in chunks of 40 differs from whole", name, p)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: %.30q… (%d bytes): merged in chunks to %d tokens, whole to %d", name, p, len(p), len(got), len(want))
				}
			}
		}
	}
}

// BenchmarkMergeLongPiece merges a mebibyte of random letters without a space,
// whole (mergeStarts) and in chunks (mergeLong): what a Counter spends on a long
// piece it has not seen.
func BenchmarkMergeLongPiece(b *testing.B) {
	c, err := New("cl100k_base")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(43, 47))
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = 'a' + byte(rng.IntN(26))
	}
	s := string(p)
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			c.t.mergeStarts(s)
		}
	})
	b.Run("chunks", func(b *testing.B) {
		for b.Loop() {
			c.t.mergeLong(s)
		}
	})
}

// FuzzDerivedCountsAsMerging holds the counts the memo derives for a prefix and a
// suffix of any bytes, and their tokens merged in chunks of any size, to merging
// them whole, in cl100k_base and o200k_base.
func FuzzDerivedCountsAsMerging(f *testing.F) {
	var tables []*table
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		c, err := New(name)
		if err != nil {
			f.Fatal(err)
		}
		tables = append(tables, &c.t)
	}
	f.Add(strings.Repeat(" ", 700), uint16(319), uint8(20))
	f.Add(strings.Repeat("a", 900), uint16(450), uint8(3))
	f.Add(strings.Repeat("abcab", 200), uint16(17), uint8(9))
	f.Add(strings.Repeat("数据处理", 100), uint16(601), uint8(40))
	f.Add(strings.Repeat("🙂!=", 120), uint16(5), uint8(1))
	f.Fuzz(func(t *testing.T, p string, cut uint16, size uint8) {
		if p == "" || len(p) > 1<<14 {
			return
		}
		for _, tb := range tables {
			l := 1 + int(cut)%len(p)
			checkDerived(t, "fuzz", tb, p, []int{l})
			if got, want := tb.mergeInChunks(p, 1+int(size)), tb.mergeStarts(p); !slices.Equal(got, want) {
				t.Fatalf("%.30q… (%d bytes) in chunks of %d: %d tokens, whole %d", p, len(p), 1+int(size), len(got), len(want))
			}
		}
	})
}

// A Counter's kept merges are shared by the goroutines counting with it: counts
// of prefixes and suffixes of long pieces from several at once are the counts of
// merging whole (run with -race).
func TestCounterWithMemoConcurrently(t *testing.T) {
	c, err := New("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(53, 59))
	pieces := longPieces(rng, 9000)
	type query struct {
		text string
		want int
	}
	var queries []query
	for _, p := range pieces[:6] {
		for range 4 {
			cut := rng.IntN(len(p))
			for _, s := range []string{p, p[:cut], p[cut:]} {
				queries = append(queries, query{s, countMerged(c, s)})
			}
		}
	}
	errs := make(chan string, 4*len(queries))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range queries {
				q := queries[(k*(g+1))%len(queries)]
				if got := c.Count(q.text); got != q.want {
					errs <- fmt.Sprintf("%.30q… (%d bytes): %d, merged whole %d", q.text, len(q.text), got, q.want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A prefix or a suffix of a long piece counted before is counted from the piece's
// merges, not merged whole: counting one of a mebibyte's allocates a few
// kilobytes where merging it would allocate more than twelve bytes a byte.
func TestCounterCountsPartsOfAKeptPieceFromItsMerges(t *testing.T) {
	c, err := New("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(61, 67))
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	p := string(b)
	c.Count(p)
	for _, part := range []string{p[:len(p)/2], p[len(p)/3:], p[:len(p)-1], p[1:]} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n := c.Count(part)
		runtime.ReadMemStats(&after)
		if n != countMerged(c, part) {
			t.Fatalf("%d bytes: %d tokens, merged whole %d", len(part), n, countMerged(c, part))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("counting %d bytes of a kept piece allocated %d bytes: merged whole", len(part), alloc)
		}
	}
}
