package context_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// words counts a text's tokens as its words: hand-made cases read easily with it.
type words struct{}

func (words) Count(text string) int { return len(strings.Fields(text)) }

func msg(role messages.Role, content string) *messages.ChatMessage {
	return &messages.ChatMessage{Role: role, Content: content}
}

func turn(i int, role messages.Role, content string) pctx.Item {
	return pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Message: msg(role, content), Pos: i, Relevance: 0.5}
}

func ids(items []messages.ContextItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func TestBuildStructuresSectionsAndMessages(t *testing.T) {
	items := []pctx.Item{
		{ID: "evidence/b", Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Text: "chunk b", Relevance: 0.9},
		turn(2, messages.RoleAssistant, "an earlier answer"),
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, "the task"), Pos: 3, Pinned: true},
		{ID: "output", Kind: pctx.KindOutput, Section: pctx.SectionOutput, Text: "answer in one line", Relevance: 1},
		{ID: "note/1", Kind: pctx.KindNote, Section: pctx.SectionState, Text: "a note", Relevance: 0.5},
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "You are terse."},
		{ID: "memory/core", Kind: pctx.KindMemory, Section: pctx.SectionState, Text: "<core_memory/>", Stable: true, Relevance: 1},
		turn(1, messages.RoleUser, "an earlier question"),
		{ID: "evidence/a", Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Text: "chunk a", Relevance: 0.2},
	}
	c, err := pctx.Builder{Tokenizer: words{}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(c.Report.Kept), " "); got != "system task note/1 memory/core evidence/b evidence/a turn/1 turn/2 output" {
		t.Errorf("kept order %q (want sections in order, then position, then as given)", got)
	}
	ms := c.Messages()
	if len(ms) != 5 {
		t.Fatalf("%d messages: %+v", len(ms), ms)
	}
	if ms[0].Role != messages.RoleSystem || ms[0].Content != "You are terse.\n\n<core_memory/>" {
		t.Errorf("system message %q", ms[0].Content)
	}
	if ms[1].Content != "an earlier question" || ms[2].Content != "an earlier answer" || ms[3].Content != "the task" {
		t.Errorf("conversation out of order: %q %q %q", ms[1].Content, ms[2].Content, ms[3].Content)
	}
	want := "<state>\na note\n</state>\n\n<evidence>\nchunk b\n\nchunk a\n</evidence>\n\n<output>\nanswer in one line\n</output>"
	if ms[4].Role != messages.RoleUser || ms[4].Content != want {
		t.Errorf("briefing\n%q\nwant\n%q", ms[4].Content, want)
	}
	if txt := c.Text(); !strings.HasPrefix(txt, "## Role & Policies\n\nYou are terse.\n\n## Task\n\nuser: the task\n\n## State\n\na note\n\n<core_memory/>") ||
		!strings.HasSuffix(txt, "## Output\n\nanswer in one line") {
		t.Errorf("text rendering:\n%s", txt)
	}
	// The report: the stable prefix is outside the budget.
	r := c.Report
	if r.Window != pctx.DefaultWindow || r.Reserved != pctx.DefaultReservedOutput || r.System != 3 || r.Budget != pctx.DefaultWindow-pctx.DefaultReservedOutput-3 {
		t.Errorf("report window %d reserved %d system %d budget %d", r.Window, r.Reserved, r.System, r.Budget)
	}
	if len(r.Dropped) != 0 || r.Over != 0 || r.Used <= 0 || r.Used > r.Budget {
		t.Errorf("report %+v", r)
	}
}

func TestBuildDropsLowestScoreFirstAndKeepsGroups(t *testing.T) {
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"},
		turn(0, messages.RoleUser, "one two three four five six seven eight"),
		turn(1, messages.RoleAssistant, "one two three four five six seven eight"),
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, "do it"), Pos: 2, Pinned: true},
		{ID: "turn/3", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 3, Relevance: 0.5, Group: "call/3",
			Message: &messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}}},
		{ID: "turn/4", Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: 4, Relevance: 0.5, Group: "call/3",
			Message: &messages.ChatMessage{Role: messages.RoleTool, ToolCallID: "c1", Content: "a b c d e f g h i j k l"}},
		turn(5, messages.RoleAssistant, "short"),
	}
	// Budget 40: task 6, turn/5 5, the group of turn/3 and turn/4 10+16: 37; turn/1 (12) no
	// longer fits, nor turn/0.
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 44, ReservedOutput: 3}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Report
	if r.Budget != 40 || r.System != 1 {
		t.Fatalf("budget %d system %d", r.Budget, r.System)
	}
	if got := strings.Join(ids(r.Kept), " "); got != "system task turn/3 turn/4 turn/5" {
		t.Errorf("kept %q", got)
	}
	if got := strings.Join(ids(r.Dropped), " "); got != "turn/0 turn/1" {
		t.Errorf("dropped %q", got)
	}
	for _, d := range r.Dropped {
		if d.Reason != pctx.ReasonBudget || d.Tokens != 12 {
			t.Errorf("dropped %+v", d)
		}
	}
	if r.Used != 37 {
		t.Errorf("used %d, want 37", r.Used)
	}
	// A budget too small for the group drops both its call and its result.
	c, err = pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 24, ReservedOutput: 3}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(c.Report.Kept), " "); got != "system task turn/5" {
		t.Errorf("kept %q", got)
	}
	for _, m := range c.Messages() {
		if m.Role == messages.RoleTool || len(m.ToolCalls) > 0 {
			t.Errorf("a part of a dropped group was sent: %+v", m)
		}
	}
}

func TestBuildHistoryWindow(t *testing.T) {
	items := []pctx.Item{{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"}}
	for i := range 40 {
		items = append(items, turn(i, messages.RoleUser, "turn"))
	}
	// turn/9 and turn/10 are a group across the cut: it goes whole.
	items[10].Group, items[11].Group = "g", "g"
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{HistoryTurns: 30}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	if c.Report.Older != 11 || len(c.Report.Kept) != 1+29 || c.Report.Kept[1].ID != "turn/11" {
		t.Errorf("older %d, kept %d from %s", c.Report.Older, len(c.Report.Kept), c.Report.Kept[1].ID)
	}
	c, err = pctx.Builder{Tokenizer: words{}, Options: pctx.Options{HistoryTurns: -1}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	if c.Report.Older != 0 || len(c.Report.Kept) != 41 {
		t.Errorf("all history: older %d kept %d", c.Report.Older, len(c.Report.Kept))
	}
}

func TestBuildTruncatesPinnedWithMarker(t *testing.T) {
	long := strings.Repeat("word ", 100)
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, long), Pinned: true, Relevance: 1, Pos: 1},
		turn(0, messages.RoleUser, "older"),
	}
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 60, ReservedOutput: 10}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Report
	if r.Used > r.Budget || r.Over != 0 {
		t.Fatalf("used %d of %d (over %d)", r.Used, r.Budget, r.Over)
	}
	if len(r.Truncated) != 1 || r.Truncated[0].ID != "task" || r.Truncated[0].From != 104 || r.Truncated[0].Tokens > r.Budget {
		t.Fatalf("truncated %+v", r.Truncated)
	}
	var task string
	for _, m := range c.Messages() {
		if m.Role == messages.RoleUser {
			task = m.Content
		}
	}
	// The middle is cut: the head and the tail stay, the marker between them.
	head, tail, ok := strings.Cut(task, "\n[… ")
	if !ok || !strings.HasPrefix(head, "word word") || !strings.HasSuffix(tail, "word ") {
		t.Fatalf("truncated task %q", task)
	}
	_, tail, _ = strings.Cut(tail, "]\n")
	cut := 100 - len(strings.Fields(head)) - len(strings.Fields(tail))
	if !strings.Contains(task, "\n"+pctx.Marker(cut)+"\n") || len(strings.Fields(head)) < len(strings.Fields(tail)) {
		t.Errorf("the marker of %q does not say %d tokens, or the head is not the larger part", task, cut)
	}
	// The older turn had no room.
	if got := strings.Join(ids(r.Dropped), " "); got != "turn/0" {
		t.Errorf("dropped %q", got)
	}
	// With a budget below the marker itself, the task is the marker alone and the
	// report says by how much the context is over.
	c, err = pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 8, ReservedOutput: 1}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	if c.Report.Over == 0 || c.Report.Used-c.Report.Budget != c.Report.Over {
		t.Errorf("over %d used %d budget %d", c.Report.Over, c.Report.Used, c.Report.Budget)
	}
}

// With HeadCut (the rule before cuts kept the tail) a cut keeps the longest head
// that fits, the marker at its end, and nothing of the tail.
func TestBuildHeadCutKeepsTheHead(t *testing.T) {
	long := strings.Repeat("word ", 100) + "question"
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, long), Pinned: true, Relevance: 1, Pos: 1},
	}
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 60, ReservedOutput: 10, HeadCut: true}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Report
	if r.Used > r.Budget || len(r.Truncated) != 1 || r.Truncated[0].ID != "task" {
		t.Fatalf("used %d of %d, truncated %+v", r.Used, r.Budget, r.Truncated)
	}
	task := c.Messages()[1].Content
	head, marker, ok := strings.Cut(task, "\n[… ")
	kept := len(strings.Fields(head))
	if !ok || strings.Contains(task, "question") || "[… "+marker != pctx.Marker(101-kept) || kept == 0 {
		t.Fatalf("head-cut task %q", task)
	}
	// One word more (the marker counts the same) would not fit: the head is the longest.
	if r.Used+1 <= r.Budget {
		t.Errorf("the head of %d words is not the longest that fits %d tokens", kept, r.Budget)
	}
}

func TestBuildReplacesAndSummarize(t *testing.T) {
	items := []pctx.Item{{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"}}
	for i := range 6 {
		items = append(items, turn(i, messages.RoleUser, "a b c d e f g h"))
	}
	items = append(items, pctx.Item{ID: "summary/0-2", Kind: pctx.KindSummary, Section: pctx.SectionContext, Pos: 0, Relevance: 0.5,
		Message: msg(messages.RoleUser, "summary of turns 0 to 2"), Replaces: []string{"turn/0", "turn/1", "turn/2"}})
	// A masked observation stands for turn/4 inside turn/4's group.
	items[4].Group, items[5].Group = "g", "g"
	items = append(items, pctx.Item{ID: "masked/4", Kind: pctx.KindMasked, Section: pctx.SectionContext, Pos: 4, Relevance: 0.5, Group: "g",
		Message: msg(messages.RoleTool, "[observation masked: see event 12]"), Replaces: []string{"turn/4"}})
	c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 40, ReservedOutput: 1, Summarize: true}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Report
	for _, d := range r.Dropped[:3] {
		if d.Reason != "replaced by summary/0-2" {
			t.Errorf("dropped %+v", d)
		}
	}
	if r.Dropped[3].ID != "turn/4" || r.Dropped[3].Reason != "replaced by masked/4" {
		t.Errorf("dropped %+v", r.Dropped[3])
	}
	// Budget 38: masked/4 and turn/3 (a group, 8+12) and turn/5 (12) fit; the summary (9) does not after them.
	if got := strings.Join(ids(r.Kept), " "); got != "system turn/3 masked/4 turn/5" {
		t.Errorf("kept %q", got)
	}
	if got := strings.Join(r.Summarize, " "); got != "summary/0-2" {
		t.Errorf("summarize %q", got)
	}
	// A summary standing for half of a group takes the whole group with it.
	items[5].Group = ""
	items = items[:len(items)-1]
	items[3].Group, items[4].Group = "h", "h"
	c, err = pctx.Builder{Tokenizer: words{}}.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Report.Dropped {
		if d.ID == "turn/3" && d.Reason != pctx.ReasonGroup {
			t.Errorf("turn/3 %+v", d)
		}
	}
}

func TestBuildRejectsInvalidItems(t *testing.T) {
	for name, items := range map[string][]pctx.Item{
		"no ID":        {{Text: "x"}},
		"duplicate ID": {{ID: "a", Text: "x"}, {ID: "a", Text: "y"}},
		"bad section":  {{ID: "a", Text: "x", Section: 42}},
	} {
		if _, err := (pctx.Builder{Tokenizer: words{}}).Build(items); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := (pctx.Builder{}).Build([]pctx.Item{{ID: "a", Text: "x"}}); err == nil {
		t.Error("an item to count without a tokenizer: no error")
	}
	if _, err := (pctx.Builder{}).Build([]pctx.Item{{ID: "a", Text: "x", Tokens: 1}}); err != nil {
		t.Errorf("counted items need no tokenizer: %v", err)
	}
}

func TestScore(t *testing.T) {
	var o pctx.Options
	if s := o.Score(1, 0); s != 1 {
		t.Errorf("relevant and newest: %v", s)
	}
	if s := o.Score(0, pctx.DefaultRecencyHalfLife); s != 0.25 {
		t.Errorf("irrelevant, one half-life old: %v", s)
	}
	if s := (pctx.Options{RelevanceWeight: 1}).Score(0.3, 100); s != 0.3 {
		t.Errorf("relevance only: %v", s)
	}
	if s := o.Score(7, 0); s != 1 {
		t.Errorf("relevance is clamped: %v", s)
	}
}

// Score is its formula, math.Pow's recency included, for every age of an item
// (those its table of the default half-life holds and older ones), at the default
// half-life and another, and under other weights.
func TestScoreIsItsFormula(t *testing.T) {
	for _, o := range []pctx.Options{{}, {RecencyHalfLife: 3}, {RelevanceWeight: 0.2, RecencyWeight: 0.8}, {RecencyHalfLife: 8.5}} {
		d := o
		if d.RelevanceWeight <= 0 && d.RecencyWeight <= 0 {
			d.RelevanceWeight, d.RecencyWeight = pctx.DefaultRelevanceWeight, pctx.DefaultRecencyWeight
		}
		if d.RecencyHalfLife <= 0 {
			d.RecencyHalfLife = pctx.DefaultRecencyHalfLife
		}
		for newer := range 200 {
			for _, rel := range []float64{0, 0.5, 1} {
				rec := math.Pow(0.5, float64(newer)/d.RecencyHalfLife)
				want := math.Round(float64((float64(d.RelevanceWeight*rel)+float64(d.RecencyWeight*rec))/(d.RelevanceWeight+d.RecencyWeight))*1e6) / 1e6
				if got := o.Score(rel, newer); got != want {
					t.Fatalf("%+v: Score(%v, %d) = %v, want %v", o, rel, newer, got, want)
				}
			}
		}
	}
}

// TestBuildPropertyBudgetPinnedGroups builds random contexts with the real
// tokenizer: the build never exceeds its budget (unless its pinned items are cut to
// their markers and still too big, which the report then says), never drops the
// system prompt or the task, never splits a tool-call group, and its report adds
// up.
func TestBuildPropertyBudgetPinnedGroups(t *testing.T) {
	tok := &rag.TiktokenCounter{}
	if err := tok.Err(); err != nil {
		t.Fatal(err)
	}
	iterations := 400
	if testing.Short() {
		iterations = 60
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for it := range iterations {
		items, window, reserved := randomItems(rng)
		opts := pctx.Options{Window: window, ReservedOutput: reserved, HistoryTurns: rng.IntN(40) - 5, Summarize: rng.IntN(2) == 0}
		c, err := pctx.Builder{Tokenizer: tok, Options: opts}.Build(items)
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		r := c.Report
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("iteration %d (window %d, reserved %d, %d items): %s\nreport %+v", it, window, reserved, len(items), fmt.Sprintf(format, args...), r)
		}
		if r.Over == 0 && r.Used > r.Budget || r.Over > 0 && r.Used-r.Budget != r.Over {
			fail("used %d of budget %d, over %d", r.Used, r.Budget, r.Over)
		}
		if r.Over > 0 {
			// Only when every truncatable kept item is its marker alone, or no longer
			// than a marker would be.
			for _, k := range c.Items {
				if k.Section == pctx.SectionRole {
					continue
				}
				text := k.Text
				if k.Message != nil {
					text = k.Message.Content
				}
				if text != "" && !strings.HasPrefix(text, "[… ") && tok.Count(text) > tok.Count("\n"+pctx.Marker(1000)) {
					fail("over budget with %s not cut to its marker: %q", k.ID, text)
				}
			}
		}
		kept := map[string]bool{}
		for _, k := range r.Kept {
			kept[k.ID] = true
		}
		if !kept["system"] || !kept["task"] {
			fail("system or task dropped")
		}
		for _, d := range r.Dropped {
			if kept[d.ID] {
				fail("%s both kept and dropped", d.ID)
			}
		}
		// Groups: all or none of the members that were candidates.
		groups := map[string][]string{}
		for _, item := range items {
			if item.Group != "" {
				groups[item.Group] = append(groups[item.Group], item.ID)
			}
		}
		for g, members := range groups {
			n := 0
			for _, m := range members {
				if kept[m] {
					n++
				}
			}
			if n != 0 && n != len(members) {
				fail("group %s split: %d of %v kept", g, n, members)
			}
		}
		// The rendered conversation pairs every call with its results.
		calls := map[string]bool{}
		for _, m := range c.Messages() {
			for _, call := range m.ToolCalls {
				calls[call.ID] = true
			}
			if m.Role == messages.RoleTool && !calls[m.ToolCallID] {
				fail("tool result %s sent without its call", m.ToolCallID)
			}
		}
		// The report adds up: the kept items' own tokens, recounted from what is
		// sent, plus framing, are what it says is used.
		sum := 0
		for _, k := range c.Items {
			if k.Section == pctx.SectionRole {
				continue
			}
			if k.Message != nil {
				sum += pctx.CountMessage(tok, *k.Message)
			} else {
				sum += tok.Count(k.Text)
			}
		}
		if sum > r.Used {
			fail("kept items count %d tokens, report says %d used", sum, r.Used)
		}
		// The same input builds the same bytes.
		again, _ := pctx.Builder{Tokenizer: tok, Options: opts}.Build(items)
		if fmt.Sprint(again.Messages()) != fmt.Sprint(c.Messages()) || fmt.Sprint(again.Report) != fmt.Sprint(r) {
			fail("two builds of one input differ")
		}
	}
}

var vocabulary = strings.Fields("the model calls a tool and reads its result before it answers ünïcødé 数据 12345 {\"json\": [1, 2]} \n\n")

func randomText(rng *rand.Rand, maxWords int) string {
	n := rng.IntN(maxWords + 1)
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()
}

// randomItems returns a random context's candidates: a system prompt, a pinned
// task, turns with tool-call groups (the latest group sometimes pinned), notes,
// evidence and core memory, and a window that leaves room for the task's marker.
func randomItems(rng *rand.Rand) (items []pctx.Item, window, reserved int) {
	system := randomText(rng, 60)
	items = append(items, pctx.Item{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: system})
	turns := rng.IntN(60)
	taskPos := rng.IntN(turns + 1)
	lastGroup := ""
	for i := 0; i < turns; i++ {
		if i == taskPos {
			items = append(items, pctx.Item{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pos: i, Pinned: true, Relevance: 1,
				Message: msg(messages.RoleUser, randomText(rng, 300))})
			continue
		}
		if rng.IntN(3) == 0 && i+1 < turns && i+1 != taskPos {
			g, at := fmt.Sprintf("g%d", i), i
			n := 1 + rng.IntN(3)
			call := &messages.ChatMessage{Role: messages.RoleAssistant, Content: randomText(rng, 5)}
			for k := range n {
				call.ToolCalls = append(call.ToolCalls, messages.ToolCall{ID: fmt.Sprintf("c%d_%d", i, k), Name: "tool", Arguments: "{\"q\": \"" + randomText(rng, 8) + "\"}"})
			}
			items = append(items, pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i, Group: g, Relevance: rng.Float64(), Message: call})
			for k := range n {
				if i+1 >= turns || i+1 == taskPos {
					break
				}
				i++
				items = append(items, pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i, Group: g, Relevance: rng.Float64(),
					Message: &messages.ChatMessage{Role: messages.RoleTool, ToolCallID: fmt.Sprintf("c%d_%d", at, k), Content: randomText(rng, 200)}})
			}
			lastGroup = g
			continue
		}
		role := messages.RoleUser
		if i%2 == 1 {
			role = messages.RoleAssistant
		}
		items = append(items, pctx.Item{ID: fmt.Sprintf("turn/%d", i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i, Relevance: rng.Float64(),
			Message: msg(role, randomText(rng, 80))})
	}
	if taskPos >= turns {
		items = append(items, pctx.Item{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pos: turns, Pinned: true, Relevance: 1,
			Message: msg(messages.RoleUser, randomText(rng, 300))})
	}
	if lastGroup != "" && rng.IntN(2) == 0 {
		for i := range items {
			if items[i].Group == lastGroup {
				items[i].Pinned = true
			}
		}
	}
	if rng.IntN(2) == 0 {
		items = append(items, pctx.Item{ID: "memory/core", Kind: pctx.KindMemory, Section: pctx.SectionState, Stable: true, Relevance: 1, Text: randomText(rng, 100)})
	}
	for n := range rng.IntN(5) {
		items = append(items, pctx.Item{ID: fmt.Sprintf("note/%d", n), Kind: pctx.KindNote, Section: pctx.SectionState, Pos: n, Relevance: rng.Float64(), Text: randomText(rng, 40)})
	}
	for n := range rng.IntN(8) {
		items = append(items, pctx.Item{ID: fmt.Sprintf("evidence/%d", n), Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Relevance: rng.Float64(), Text: randomText(rng, 120)})
	}
	// Shuffle: the build must not depend on the order items come in, beyond ties.
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	reserved = 1 + rng.IntN(200) // 0 would be the default
	// Room for the system prompt (at most ~3 tokens a word) and, mostly, more.
	window = reserved + 3*60 + 40 + rng.IntN(4000)
	return items, window, reserved
}

// Summarize lists, lowest value first, what a summary could stand for: pinned
// items cut, by what they would have scored, and a Stable State item dropped for
// the budget; without Summarize, nothing.
func TestBuildSummarizeListsCutAndDroppedStableItems(t *testing.T) {
	long := strings.Repeat("w ", 60)
	items := []pctx.Item{
		{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys"},
		{ID: "memory/core", Kind: pctx.KindMemory, Section: pctx.SectionState, Stable: true, Text: strings.Repeat("m ", 80), Relevance: 1},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Message: msg(messages.RoleUser, long), Pinned: true, Relevance: 1, Pos: 0},
		{ID: "turn/1", Kind: pctx.KindTurn, Section: pctx.SectionContext, Message: msg(messages.RoleTool, long), Pinned: true, Relevance: 0.2, Pos: 1},
	}
	for _, summarize := range []bool{true, false} {
		c, err := pctx.Builder{Tokenizer: words{}, Options: pctx.Options{Window: 40, ReservedOutput: 1, Summarize: summarize}}.Build(items)
		if err != nil {
			t.Fatal(err)
		}
		r := c.Report
		if len(r.Truncated) != 2 || r.Dropped[0].ID != "memory/core" {
			t.Fatalf("truncated %+v, dropped %+v: want both pinned items cut and core memory dropped", r.Truncated, r.Dropped)
		}
		// turn/1 would score 0.6; core memory and the task 1, in input order.
		want := "turn/1 memory/core task"
		if !summarize {
			want = ""
		}
		if got := strings.Join(r.Summarize, " "); got != want {
			t.Errorf("summarize %v: %q, want %q", summarize, got, want)
		}
	}
}
