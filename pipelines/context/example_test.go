package context_test

import (
	"fmt"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// A context for a window too small for the whole conversation: the task and the
// latest call with its result are pinned, the older turns compete on score.
func ExampleBuilder_Build() {
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You answer with the tools' help."},
		{ID: "turn/0", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 0, Relevance: 0.5,
			Message: &messages.ChatMessage{Role: messages.RoleUser, Content: "an earlier question, long ago, with many words in it"}},
		{ID: "turn/1", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 1, Relevance: 0.5,
			Message: &messages.ChatMessage{Role: messages.RoleAssistant, Content: "its answer"}},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pos: 2, Pinned: true,
			Message: &messages.ChatMessage{Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}},
		{ID: "turn/3", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 3, Group: "call/3", Pinned: true,
			Message: &messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression": "12 * (7 + 5)"}`}}}},
		{ID: "turn/4", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 4, Group: "call/3", Pinned: true,
			Message: &messages.ChatMessage{Role: messages.RoleTool, ToolCallID: "c1", Content: "144"}},
	}
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 64, ReservedOutput: 20}}.Build(items)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := c.Report
	fmt.Printf("budget %d, used %d\n", r.Budget, r.Used)
	for _, k := range r.Kept {
		fmt.Printf("+ %-7s %2d tokens  score %.3f\n", k.ID, k.Tokens, k.Score)
	}
	for _, d := range r.Dropped {
		fmt.Printf("- %-7s %2d tokens  score %.3f  %s\n", d.ID, d.Tokens, d.Score, d.Reason)
	}
	for _, m := range c.Messages() {
		fmt.Printf("%s: %q %d call(s)\n", m.Role, m.Content, len(m.ToolCalls))
	}
	// Output:
	// budget 38, used 37
	// + system   6 tokens  score 1.000
	// + task    11 tokens  score 1.000
	// + turn/1   6 tokens  score 0.670
	// + turn/3  15 tokens  score 1.000
	// + turn/4   5 tokens  score 1.000
	// - turn/0  14 tokens  score 0.636  budget
	// system: "You answer with the tools' help." 0 call(s)
	// assistant: "its answer" 0 call(s)
	// user: "What is 12 * (7 + 5)?" 0 call(s)
	// assistant: "" 1 call(s)
	// tool: "144" 0 call(s)
}
