package context_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// The items rendered in one message (the briefing's evidence, notes and memories;
// the system message's stable parts) were counted one by one, plus JoinTokens for
// each "\n\n" between them and the section's tags counted apart. cl100k_base is not
// additive across those joins: a text ending in whitespace with carriage returns
// (" \r\r\n", a chunk of a document with old line endings) merges with the "\n\n"
// after it into pieces that count more than their parts, some 2 tokens a join. So
// the briefing sent counted more than the build budgeted, and with many such items
// the prompt was over the window itself: 400 evidence chunks, window 2100, 100
// reserved, 8 of system, and 2,425 tokens of briefing were sent (a session's
// briefing holds up to MaxEvidence + MaxRecall + MaxNotes = 220 items: some 440
// tokens taken from the answer's reserve). Today's rules count such a message as
// it is sent, and the report's Used is what is sent.
func TestBriefingJoinsStayWithinTheBudget(t *testing.T) {
	tok := &pctx.Cl100k{}
	for _, text := range []string{"/'llab\n\nchunk text<\r\r\r\n", "a \r\r\n"} {
		items := []pctx.Item{{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys", Tokens: 8},
			{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pinned: true, Relevance: 1, Message: msg(messages.RoleUser, "hi")}}
		for i := range 400 {
			items = append(items, pctx.Item{ID: fmt.Sprintf("evidence/%d", i), Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Relevance: 0.5, Text: text})
		}
		for _, window := range []int{1300, 2100} {
			c, err := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: window, ReservedOutput: 100}}.Build(items)
			if err != nil {
				t.Fatal(err)
			}
			sent := 0
			for _, m := range c.Messages()[1:] {
				sent += pctx.CountMessage(tok, m)
			}
			if sent > c.Report.Budget || sent != c.Report.Used {
				t.Errorf("%q, window %d: %d items kept, %d tokens sent after the system message, budget %d (report: used %d)",
					text, window, len(c.Report.Kept), sent, c.Report.Budget, c.Report.Used)
			}
		}
	}
}

// joinItems returns n notes and n evidence chunks of text, with the system
// message's stable State items, an output item and a long pinned chunk of it.
func joinItems(text string, n int) []pctx.Item {
	items := []pctx.Item{{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: "sys \r\r\n", Tokens: 8},
		{ID: "memory/core", Kind: pctx.KindMemory, Section: pctx.SectionState, Stable: true, Relevance: 1, Text: "core " + text},
		{ID: "state/plan", Kind: pctx.KindState, Section: pctx.SectionState, Stable: true, Relevance: 1, Text: text},
		{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pinned: true, Relevance: 1, Message: msg(messages.RoleUser, "hi")},
		{ID: "evidence/pinned", Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Pinned: true, Pos: n, Text: strings.Repeat(text+"long ", 60)},
		{ID: "output", Kind: pctx.KindOutput, Section: pctx.SectionOutput, Relevance: 0.9, Text: "answer briefly" + text}}
	for i := range n {
		items = append(items, pctx.Item{ID: fmt.Sprintf("note/%d", i), Kind: pctx.KindNote, Section: pctx.SectionState, Relevance: 0.4, Pos: i, Text: text})
		items = append(items, pctx.Item{ID: fmt.Sprintf("evidence/%d", i), Kind: pctx.KindEvidence, Section: pctx.SectionEvidence, Relevance: 0.5, Pos: i, Text: text})
	}
	return items
}

var joinTexts = []string{"/'llab\n\nchunk text<\r\r\r\n", "a \r\r\n", "plain words.", " lead\n", "x"}

// buildHash returns the hash of what Build and BuildMessages make of items: their
// messages and reports.
func buildHash(t *testing.T, b pctx.Builder, items []pctx.Item) string {
	t.Helper()
	c, err := b.Build(items)
	if err != nil {
		t.Fatal(err)
	}
	msgs, rep, err := b.BuildMessages(items)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(struct {
		A, B []messages.ChatMessage
		R, S messages.ContextReport
	}{c.Messages(), msgs, c.Report, *rep})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(j))
}

// Under the rules before joins were counted (AdditiveJoins: the session's context
// rules 1 to 8), a build makes the messages and the report it made before, byte
// for byte: the hashes are of 266af02's builds (the commit before the joins were
// counted), stable State items, notes, evidence, an output item and a pinned chunk
// cut to fit included.
func TestAdditiveJoinsBuildAsBefore(t *testing.T) {
	golden := []struct {
		text   string
		window int
		hash   string
	}{
		{"/'llab\n\nchunk text<\r\r\r\n", 300, "6d68220e0c2f513601ee89da1d78fb53c882f01fa859e245f0f34a4bf871e05e"},
		{"/'llab\n\nchunk text<\r\r\r\n", 1300, "ad51f5e562ae3a646f3018dc827887011d75fdea8951d91001d0e3e9bb5e717a"},
		{"/'llab\n\nchunk text<\r\r\r\n", 2100, "02af293f4d8123dee7c7bf50a9429e7545ce223806c04e11d7221c03553d36e7"},
		{"a \r\r\n", 300, "f2d5c4cd1f925ea970bcf3546929bc8776c9e32a5df059b95fee2f77a6b403de"},
		{"a \r\r\n", 1300, "5e09d2ca28cc72cd40a84d64a4beff29478b8d21e7e16452e27222c661d2621e"},
		{"a \r\r\n", 2100, "a150d828b27fc3c8ff5222b1d75c2b67687eb0f77625217d0d4b45d473965784"},
		{"plain words.", 300, "ef0615f08542fec1f01e948bfc9e2eead2942f17a1b0f298674311fc26c98f65"},
		{"plain words.", 1300, "7d1f2e4b9e4daab49bb744c7bb57dd6d3ea66a3b4d22798d46c3552b4b0a759f"},
		{"plain words.", 2100, "58377140a4a2ba4a0c4015b306e1b96462f12d4d549eaa3e5f877b60933e1c3d"},
		{" lead\n", 300, "9d0db79550ebd8bf7987969415a2550a2c300f68b14b31a3c532e4dfeaf41a83"},
		{" lead\n", 1300, "16f8c993e9d1094ec4d59e9b768925a8c0c7dcc656f8d9032dab7c68d96d4e25"},
		{" lead\n", 2100, "f4bc2a27a660b3042c33e8961bde05434da76059996e43e13cfd8092e0d24a92"},
		{"x", 300, "851f0bd9799ac07c65ffd6809c0b6648603dd78377d72118d1ac2ff7579210e0"},
		{"x", 1300, "b599bd152d2117eb57f7ffae44300b59af5b07844d68545d454f38c110d80a0c"},
		{"x", 2100, "2c3b7d5c4c4c83925c6303fe386c8c09a0d88558766aa66ce8f7c7ae6a51fffc"},
	}
	tok := &pctx.Cl100k{}
	for _, g := range golden {
		b := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: g.window, ReservedOutput: 100, AdditiveJoins: true}}
		if got := buildHash(t, b, joinItems(g.text, 200)); got != g.hash {
			t.Errorf("%q, window %d: hash %s, want %s", g.text, g.window, got, g.hash)
		}
	}
}

// Under today's rules the report's Used is what the messages send, the system
// message's stable State items and pinned text cut to fit included: the system
// message's tokens beyond the Role & Policies item's (System) and those of the
// other messages; and it is within the budget or Over says by how much.
func TestJoinedMessagesCountAsSent(t *testing.T) {
	tok := &pctx.Cl100k{}
	for _, text := range joinTexts {
		items := joinItems(text, 200)
		items[0].Tokens = pctx.MessageOverhead + tok.Count(items[0].Text)
		for _, window := range []int{300, 1300, 2100, 20000} {
			b := pctx.Builder{Tokenizer: tok, Options: pctx.Options{Window: window, ReservedOutput: 100}}
			msgs, rep, err := b.BuildMessages(items)
			if err != nil {
				t.Fatal(err)
			}
			sent := -rep.System
			for _, m := range msgs {
				sent += pctx.CountMessage(tok, m)
			}
			if sent != rep.Used || rep.Used-rep.Budget != rep.Over && !(rep.Over == 0 && rep.Used <= rep.Budget) {
				t.Errorf("%q, window %d: %d kept, %d sent beyond the system prompt, report: used %d, budget %d, over %d",
					text, window, len(rep.Kept), sent, rep.Used, rep.Budget, rep.Over)
			}
		}
	}
}
