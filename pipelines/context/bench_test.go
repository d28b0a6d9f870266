package context_test

import (
	"fmt"
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
