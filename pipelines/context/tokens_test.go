package context_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// countOnly is a cl100k_base Tokenizer without CountWithin: the builder counts
// every text it tries whole. It adds up the tokens it counted.
type countOnly struct {
	c       *pctx.Cl100k
	counted *int
}

func (t countOnly) Count(text string) int {
	n := t.c.Count(text)
	*t.counted += n
	return n
}

// bounded is countOnly with CountWithin, counting what CountWithin counted.
type bounded struct{ countOnly }

func (t bounded) CountWithin(text string, limit int) (int, bool) {
	n, ok := t.c.CountWithin(text, limit)
	*t.counted += n
	return n, ok
}

// Cutting a long text to a small window searches for the longest head and tail
// that fit by counting only about the window's worth of text at each try (a 1 MB
// tool result cost seconds of counting per model call), and cuts it where a
// search that counts the whole text at each try cuts it: the same bytes, so
// recorded sessions replay as they ran.
func TestCutCountsAboutTheWindowNotTheText(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 400_000 {
		b.WriteString([]string{"alpha ", "beta ", "gamma\n", "12345 ", "Lisbon, ", "数据 ", "x=1; "}[rng.IntN(7)])
	}
	items := func() []pctx.Item {
		return []pctx.Item{
			{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You help."},
			{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, "Read this."), Pinned: true, Relevance: 1, Pos: 1},
			{ID: "turn/2", Kind: pctx.KindTurn, Section: pctx.SectionContext, Message: msg(messages.RoleTool, b.String()), Pinned: true, Relevance: 1, Pos: 2},
		}
	}
	cl := &pctx.Cl100k{}
	whole := cl.Count(b.String())
	for _, opts := range []pctx.Options{{Window: 3000, ReservedOutput: 500}, {Window: 3000, ReservedOutput: 500, HeadCut: true}} {
		var plainCounted, boundedCounted int
		plain, err := pctx.Builder{Tokenizer: countOnly{cl, &plainCounted}, Options: opts}.Build(items())
		if err != nil {
			t.Fatal(err)
		}
		fast, err := pctx.Builder{Tokenizer: bounded{countOnly{cl, &boundedCounted}}, Options: opts}.Build(items())
		if err != nil {
			t.Fatal(err)
		}
		pm, fm := plain.Messages(), fast.Messages()
		if len(plain.Report.Truncated) != 1 || len(pm) != len(fm) || pm[len(pm)-1].Content != fm[len(fm)-1].Content || plain.Report.Used != fast.Report.Used {
			t.Fatalf("head cut %v: the cuts differ: %d and %d tokens used, truncated %+v", opts.HeadCut, plain.Report.Used, fast.Report.Used, plain.Report.Truncated)
		}
		// The whole text is counted twice (the item, then its size for the marker);
		// the searches count about the window at each try, not the text's half.
		if boundedCounted > 3*whole {
			t.Errorf("head cut %v: cutting a text of %d tokens to a window of %d counted %d tokens (%.1f times the text); the whole-text search counted %d",
				opts.HeadCut, whole, opts.Window, boundedCounted, float64(boundedCounted)/float64(whole), plainCounted)
		}
		t.Logf("head cut %v: a text of %d tokens cut to %d: %d tokens counted (%d counting whole texts)", opts.HeadCut, whole, opts.Window, boundedCounted, plainCounted)
	}
}
