package context_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// benchItems returns n candidates as a long session would gather them, counted
// already (a session caches its turns' counts): a system prompt, a pinned task,
// and turns (a third of them in tool-call groups), notes and evidence, every
// turn a candidate (HistoryTurns -1).
func benchItems(n int) []pctx.Item {
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You are a careful agent.", Tokens: 600},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, "the task"), Tokens: 200, Pinned: true, Pos: n},
	}
	for i := 0; len(items) < n; i++ {
		it := pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i,
			Relevance: float64(i%10) / 10, Tokens: 20 + i%300, Message: msg(messages.RoleAssistant, "a turn")}
		switch i % 6 {
		case 0, 1:
			it.Group = fmt.Sprintf("g%d", i/6)
		case 2:
			it = pctx.Item{ID: fmt.Sprintf("note/%d", i), Kind: pctx.KindNote, Section: pctx.SectionState, Pos: i, Relevance: 0.5, Tokens: 40, Text: "a note"}
		case 3:
			it = pctx.Item{ID: fmt.Sprintf("evidence/%d", i), Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Relevance: float64(i%7) / 7, Tokens: 300, Text: "a chunk"}
		}
		items = append(items, it)
	}
	return items
}

func benchmarkBuild(b *testing.B, n int) {
	items := benchItems(n)
	bl := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{HistoryTurns: -1}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := bl.Build(items)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Messages()) == 0 {
			b.Fatal("empty context")
		}
	}
}

// BenchmarkBuild10k builds a context from 10,000 candidates into the default
// window; BenchmarkBuild1k is its baseline with 1,000, so the two read as a ratio.
func BenchmarkBuild10k(b *testing.B) { benchmarkBuild(b, 10000) }

// BenchmarkBuild1k is BenchmarkBuild10k's baseline.
func BenchmarkBuild1k(b *testing.B) { benchmarkBuild(b, 1000) }

// BenchmarkJoinHistory10k is what a request cost before the builder: the system
// message and the whole history, joined.
func BenchmarkJoinHistory10k(b *testing.B) {
	items := benchItems(10000)
	history := make([]messages.ChatMessage, 0, len(items))
	for _, it := range items {
		if it.Message != nil {
			history = append(history, *it.Message)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		msgs := make([]messages.ChatMessage, 0, len(history)+1)
		msgs = append(msgs, messages.ChatMessage{Role: messages.RoleSystem, Content: "You are a careful agent."})
		msgs = append(msgs, history...)
		if len(msgs) == 0 {
			b.Fatal("empty")
		}
	}
}

// BenchmarkBuild40 is a session's usual build: 40 candidates.
func BenchmarkBuild40(b *testing.B) { benchmarkBuild(b, 40) }

// benchmarkTruncateLongPiece is one decision's context build over a task whose
// input is a mebibyte of random lowercase letters without a space (one piece of
// cl100k_base), into a window of window tokens: the builder counts the input and
// searches for where to cut it. Each build is of a text it has not seen, so no
// count of an earlier build is of use to it.
//
// With again, every build is of the same text, as the decisions after a task's
// first are: the counter has the text's merges from the build before.
func benchmarkTruncateLongPiece(b *testing.B, window int, again bool) {
	tok := &pctx.Cl100k{}
	bl := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: window, ReservedOutput: window / 8}}
	rng := rand.New(rand.NewPCG(uint64(window), 1))
	text := make([]byte, 1<<20)
	tok.Count("load the ranks before the clock starts")
	b.ReportAllocs()
	first := true
	for b.Loop() {
		b.StopTimer()
		for i := range text {
			if !again || first {
				text[i] = 'a' + byte(rng.IntN(26))
			}
		}
		first = false
		items := []pctx.Item{
			{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You are a careful agent."},
			{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, string(text)), Pinned: true},
		}
		b.StartTimer()
		c, err := bl.Build(items)
		if err != nil {
			b.Fatal(err)
		}
		if r := c.Report; r.Over > 0 {
			b.Fatalf("over the budget by %d", r.Over)
		}
	}
}

// BenchmarkTruncateLongPiece4k cuts the mebibyte piece to a 4k window.
func BenchmarkTruncateLongPiece4k(b *testing.B) { benchmarkTruncateLongPiece(b, 4000, false) }

// BenchmarkTruncateLongPiece8k cuts the mebibyte piece to an 8k window.
func BenchmarkTruncateLongPiece8k(b *testing.B) { benchmarkTruncateLongPiece(b, 8000, false) }

// BenchmarkTruncateLongPiece128k cuts the mebibyte piece to a 128k window.
func BenchmarkTruncateLongPiece128k(b *testing.B) { benchmarkTruncateLongPiece(b, 128000, false) }

// BenchmarkTruncateLongPieceAgain8k is BenchmarkTruncateLongPiece8k's later
// decisions: the same text each build.
func BenchmarkTruncateLongPieceAgain8k(b *testing.B) { benchmarkTruncateLongPiece(b, 8000, true) }

// BenchmarkTruncateLongPieceAgain128k is BenchmarkTruncateLongPiece128k's later
// decisions: the same text each build.
func BenchmarkTruncateLongPieceAgain128k(b *testing.B) { benchmarkTruncateLongPiece(b, 128000, true) }

// briefingItems returns a session's build with gathered material: a system
// prompt, a pinned task, 10 turns, 20 document chunks of some 300 tokens (every
// third with old line endings) and 5 notes, counted already as a session caches
// them, with cl100k_base.
func briefingItems(tok *pctx.Cl100k) []pctx.Item {
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You are a careful agent."},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, "What does the ledger say about carriers?"), Pinned: true, Pos: 10},
	}
	for i := range 10 {
		items = append(items, pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i, Relevance: 0.5,
			Message: msg(messages.RoleAssistant, fmt.Sprintf("Turn %d: looked at the ledger's shipments by carrier.", i))})
	}
	for i := range 20 {
		end := ".\n"
		if i%3 == 0 {
			end = " \r\r\n"
		}
		text := fmt.Sprintf("[ledger.md > carriers %d]\n", i) + strings.Repeat("The ledger lists every shipment by date, carrier and weight; ", 25) + end
		items = append(items, pctx.Item{ID: fmt.Sprintf("evidence/%d", i), Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Relevance: float64(20-i) / 20, Pos: 10, Text: text})
	}
	for i := range 5 {
		items = append(items, pctx.Item{ID: fmt.Sprintf("note/%d", i), Kind: pctx.KindNote, Section: pctx.SectionState, Relevance: 0.5, Pos: 10, Text: fmt.Sprintf("Note %d: carriers are listed by weight.", i)})
	}
	for i := range items {
		if items[i].Message != nil {
			items[i].Tokens = pctx.CountMessage(tok, *items[i].Message)
		} else {
			items[i].Tokens = pctx.CountText(tok, items[i].Text)
		}
	}
	return items
}

func benchmarkBuildBriefing(b *testing.B, window int) {
	tok := &pctx.Cl100k{}
	items := briefingItems(tok)
	bl := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: window, ReservedOutput: 500}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		msgs, _, err := bl.BuildMessages(items)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			b.Fatal("empty context")
		}
	}
}

// BenchmarkBuildBriefing is a session's build with gathered material (40
// candidates, 20 of them document chunks) that all fit the default window.
func BenchmarkBuildBriefing(b *testing.B) { benchmarkBuildBriefing(b, pctx.DefaultWindow) }

// BenchmarkBuildBriefing4k is BenchmarkBuildBriefing into a 4k window: half the
// chunks are left out.
func BenchmarkBuildBriefing4k(b *testing.B) { benchmarkBuildBriefing(b, 4000) }
