package context_test

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// longPieceCase is a task whose input is one long piece, cut to a window.
type longPieceCase struct {
	name    string
	text    func(rng *rand.Rand) string
	window  int
	headCut bool
	// want is what the build gave before the counter kept long pieces' merges:
	// the task's tokens, the tokens used, the cut text's length and the first
	// bytes of its SHA-256.
	want string
}

func randomRun(rng *rand.Rand, n int, atoms ...string) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(atoms[rng.IntN(len(atoms))])
	}
	return b.String()
}

func letters(alphabet string) []string { return strings.Split(alphabet, "") }

var longPieceCases = []longPieceCase{
	{name: "letters 1 MiB to 4k", want: "tokens 3494 used 3494 bytes 6520 sha 876aaa1b1603", window: 4000, text: func(rng *rand.Rand) string { return randomRun(rng, 1<<20, letters("abcdefghijklmnopqrstuvwxyz")...) }},
	{name: "letters 1 MiB to 8k", want: "tokens 6994 used 6994 bytes 12943 sha ba3004627931", window: 8000, text: func(rng *rand.Rand) string { return randomRun(rng, 1<<20, letters("abcdefghijklmnopqrstuvwxyz")...) }},
	{name: "letters 1 MiB to 128k", want: "tokens 111994 used 111994 bytes 207278 sha 9b01db2b5351", window: 128000, text: func(rng *rand.Rand) string { return randomRun(rng, 1<<20, letters("abcdefghijklmnopqrstuvwxyz")...) }},
	{name: "one letter 200 KB to 8k", want: "tokens 6994 used 6994 bytes 55878 sha 44122b37bf3e", window: 8000, text: func(*rand.Rand) string { return strings.Repeat("a", 200_000) }},
	{name: "ab 300 KB to 16k, head cut", want: "tokens 13994 used 13994 bytes 33465 sha 0282202ac724", window: 16000, headCut: true, text: func(rng *rand.Rand) string { return randomRun(rng, 300_000, "a", "b") }},
	{name: "CJK 150 KB to 4k", want: "tokens 3494 used 3494 bytes 11025 sha 88c920f7e790", window: 4000, text: func(rng *rand.Rand) string { return randomRun(rng, 150_000, "数", "据", "处", "理", "日", "本") }},
	{name: "emoji and marks 100 KB to 8k", want: "tokens 6994 used 6994 bytes 11647 sha cd8c4352cee3", window: 8000, text: func(rng *rand.Rand) string { return randomRun(rng, 100_000, "🙂", "👍🏽", "!", "?", "—", "=") }},
	{name: "spaces 100 KB to 500", want: "tokens 432 used 432 bytes 53583 sha a52c1a371c00", window: 500, text: func(*rand.Rand) string { return "x" + strings.Repeat(" ", 100_000) + "y" }},
	{name: "mixed to 8k, head cut", want: "tokens 6994 used 6994 bytes 17670 sha 747c4b44c7fd", window: 8000, headCut: true, text: func(rng *rand.Rand) string {
		return strings.Repeat("word ", 2000) + randomRun(rng, 200_000, letters("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")...) + "\n\n" + strings.Repeat("1234 ", 3000)
	}},
	{name: "mixed to 8k", want: "tokens 6994 used 6994 bytes 17922 sha efb9091bedcd", window: 8000, text: func(rng *rand.Rand) string {
		return strings.Repeat("word ", 2000) + randomRun(rng, 200_000, letters("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")...) + "\n\n" + strings.Repeat("1234 ", 3000)
	}},
}

// buildLongPiece builds the case's context and describes the task's cut.
func buildLongPiece(t *testing.T, tok *pctx.Cl100k, tc longPieceCase, seed uint64) string {
	t.Helper()
	text := tc.text(rand.New(rand.NewPCG(seed, 7)))
	bl := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: tc.window, ReservedOutput: tc.window / 8, HeadCut: tc.headCut}}
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You are a careful agent."},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, text), Pinned: true},
	}
	c, err := bl.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range c.Items {
		if it.ID == "task" {
			sum := sha256.Sum256([]byte(it.Message.Content))
			return fmt.Sprintf("tokens %d used %d bytes %d sha %x", it.Tokens, c.Report.Used, len(it.Message.Content), sum[:6])
		}
	}
	t.Fatal("task dropped")
	return ""
}

// TestCutOfLongPieceAsBefore holds the cuts of tasks whose input is one long
// piece (letters without a space, CJK, emoji, spaces; runs of one letter) to
// what the builder cut before the counter kept long pieces' merges, byte for
// byte: the cut is part of a decision. Each case is built twice with one counter,
// so the second build counts from the merges the first kept.
func TestCutOfLongPieceAsBefore(t *testing.T) {
	tok := &pctx.Cl100k{}
	for i, tc := range longPieceCases {
		got := buildLongPiece(t, tok, tc, uint64(i))
		if os.Getenv("TROUPE_PRINT_CUTS") != "" {
			fmt.Printf("%q\n", got)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: %s; before: %s", tc.name, got, tc.want)
		}
		if again := buildLongPiece(t, tok, tc, uint64(i)); again != tc.want {
			t.Errorf("%s, built again: %s; before: %s", tc.name, again, tc.want)
		}
	}
}
