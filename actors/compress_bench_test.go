package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// benchConversation runs a 200-turn conversation (50 tasks of four turns: the
// question, a fetch and its result, the answer; one result in three large) with
// compression c, and returns the prompt tokens of the loop's calls and of all
// calls (compression's own included), the cached tokens of all calls (the scripted
// models simulate a provider's prompt cache), and the loop's calls. Tokens are the
// scripted models' estimate (llm.EstimateTokens: four bytes a token).
func benchConversation(b *testing.B, c Compression) (loopTokens, allTokens, cached, loops int) {
	a := compressAgent(c)
	a.SystemPrompt = longPrompt
	a.Context.HistoryTurns = -1 // the builder's own window left out: the strategy alone decides
	fetches := 0
	cache := llm.NewPromptCache(0)
	r := newCompressRun(b, a,
		scriptOf(b, "m", callStep("call_1", "fetch", `{"url":"x"}`), llm.ScriptStep{Content: "Here is what the page says, in short."}, llm.ScriptStep{Content: "Done."}).WithPromptCache(cache),
		scripted(b, "summariser", 10, func(int) string {
			return "- The user asked a series of questions; pages were fetched and each answered in short.\n- " + strings.Repeat("Detail. ", 30)
		}).WithPromptCache(cache),
		func(messages.ToolCallRequested) string {
			fetches++
			if fetches%3 == 0 {
				return bigPage
			}
			return fmt.Sprintf("Page %d: a short answer.", fetches)
		})
	r.keepRequests = false
	for i := range 50 {
		r.task(fmt.Sprintf("Question %d: what does page %d say about item %d?", i, i, i*3))
	}
	for i, u := range r.usage {
		allTokens += u.PromptTokens
		cached += u.CachedTokens
		if r.purposes[i] == "" {
			loopTokens += u.PromptTokens
			loops++
		}
	}
	return loopTokens, allTokens, cached, loops
}

// BenchmarkCompression measures the prompt tokens per loop call of a 200-turn
// conversation under each strategy against sending everything, in the same run:
// tokens/call counts every call's prompt (a strategy's own summaries included) per
// loop call, loop-tokens/call the loop's alone, ratio tokens/call over the
// everything baseline's, cached/call the cached tokens of every call per loop call.
//
//	go test ./actors -run '^$' -bench BenchmarkCompression -benchtime 3x
func BenchmarkCompression(b *testing.B) {
	_, base, _, baseLoops := benchConversation(b, Compression{})
	strategies := append(append([]string{"everything"}, pctx.CompressStrategies...), "summary+mask")
	for _, s := range strategies {
		b.Run(s, func(b *testing.B) {
			c := Compression{Strategy: s, CompactTokens: 3000}
			if s == "everything" {
				c.Strategy = ""
			}
			var loop, all, cached, loops int
			for b.Loop() {
				loop, all, cached, loops = benchConversation(b, c)
			}
			b.ReportMetric(float64(cached)/float64(loops), "cached/call")
			b.ReportMetric(float64(all)/float64(loops), "tokens/call")
			b.ReportMetric(float64(loop)/float64(loops), "loop-tokens/call")
			b.ReportMetric((float64(all)/float64(loops))/(float64(base)/float64(baseLoops)), "ratio")
		})
	}
}
